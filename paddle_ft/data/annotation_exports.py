"""What people labelled in an annotation tool, from the tool's export (`import-annotations`): Label Studio's
(data.label_studio_export) or doccano's (data.doccano_export)."""
from __future__ import annotations

from pathlib import Path

from paddle_ft.data import text_files
from paddle_ft.data.annotation import ImportReport, Labelled
from paddle_ft.data.doccano_export import read_doccano
from paddle_ft.data.label_studio_export import read_label_studio
from paddle_ft.errors import DataError


def read_annotations(path: Path, tool: str, from_name: str | None = None) -> tuple[list[Labelled], ImportReport]:
    """The labelled texts of a `tool` export, in its order."""
    path = text_files.check_readable(path)
    report = ImportReport()
    rows = read_label_studio(path, from_name, report) if tool == "label-studio" else read_doccano(path, report)
    if not rows:
        raise DataError(str(path), None, f"no labelled task ({report.unlabelled} without an answer): label some in "
                                         f"{tool} and export again")
    return rows, report
