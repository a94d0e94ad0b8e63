"""Pictures of the real Label Studio showing paddle_ft's pre-annotations, for docs/labelling.md:

    make label-studio-screenshots    # after make demo (the demo's model answers)

Starts Label Studio (its own environment) and `serve --export out/demo/export --label-studio`, makes a project with
the labelling config export-tasks writes, imports 20 texts of the demo's test file, connects the model as a user
does in the project's settings, retrieves its predictions and annotates three tasks; then photographs in Debian's
Chromium, through Playwright (installed into Label Studio's environment by the make target): the labelling page of
the task the model is least sure of, showing paddle_ft's prediction; the project's model card.
Everything it starts is stopped at the end; the pictures go to docs/images/label-studio-*.png."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.server_process import ServerProcess  # noqa: E402
from annotation_harness.label_studio import PASSWORD, TOOL_BIN, USER, LabelStudio  # noqa: E402

from paddle_ft.data.readers import Columns, read_examples  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", default="out/demo/export")
    parser.add_argument("--texts", default="data/demo/test.tsv")
    parser.add_argument("--output", default="docs/images")
    args = parser.parse_args()
    texts = [e.text for e in read_examples(args.texts, "tsv", Columns())[0][:20]]
    with tempfile.TemporaryDirectory(prefix="paddle_ft-screenshots-") as scratch:
        scratch = Path(scratch)
        tool = LabelStudio(scratch / "label-studio", ML_BLOCK_LOCAL_IP="false", USE_DEFAULT_BANNED_SUBNETS="false")
        server = None
        try:
            server = ServerProcess(args.export, scratch / "serve.log", "--label-studio", scratch / "backend")
            subprocess.run([sys.executable, "-m", "paddle_ft", "export-tasks", "--model",
                            str(Path(args.export).parent / "best"), "--input", args.texts, "--to", "label-studio",
                            "--output-file", str(scratch / "tasks.json")], check=True, capture_output=True)
            config = (scratch / "tasks.label_config.xml").read_text(encoding="utf-8")
            project = tool.call("create_project", title="Reviews (paddle_ft pre-annotations)", label_config=config)
            tool.call("import_tasks", project=project, tasks=[{"data": {"text": text}} for text in texts])
            model = tool.call("connect_model", project=project, url=server.url, title="paddle_ft e5-small")
            tool.call("retrieve_predictions", project=project)
            shown = tool.call("tasks", project=project)
            least_sure = min(shown, key=lambda t: t["predictions"][0]["score"])
            for task in shown[:3]:
                tool.call("annotate", task=task["id"], result=task["predictions"][0]["result"])
            output = (ROOT / args.output).resolve()
            pages = [{"path": f"/projects/{project}/data?task={least_sure['id']}",
                      "file": str(output / "label-studio-pre-annotation.png")},
                     {"path": f"/projects/{project}/settings/ml", "file": str(output / "label-studio-model.png")}]
            subprocess.run([str(TOOL_BIN / "python"), str(Path(__file__).parent / "annotation_harness" /
                                                           "screenshots.py"), tool.url, USER, PASSWORD,
                            json.dumps(pages)], check=True)
            print(f"model {model['model_version']}; least sure: task {least_sure['id']} "
                  f"({least_sure['predictions'][0]['score']:.3f}); pictures: " + ", ".join(p["file"] for p in pages))
        finally:
            if server is not None:
                server.stop()
            tool.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
