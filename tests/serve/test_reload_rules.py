"""Issue 43, root 4: a reload works from "no model loaded" (the first load failed, the folder was fixed), and refuses a
model that would change what clients send or get back, the served one answering on."""
import asyncio
import os

from conftest import export_tiny_model

from paddle_ft.inference.options import PredictOptions
from paddle_ft.inference.predictor import Predictor
from paddle_ft.serve.app import ModelSlot
from paddle_ft.serve.metrics import Metrics


def point(link, target) -> None:
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    os.replace(fresh, link)


def slot_on(link) -> ModelSlot:
    return ModelSlot(lambda folder=link: Predictor(folder, PredictOptions(cpu_threads=1)), Metrics(), link)


def test_a_server_whose_first_load_failed_loads_the_fixed_folder_on_reload(tmp_path, capsys):
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "not-yet")
    slot = slot_on(link)
    asyncio.run(slot.load())
    assert slot.predictor is None and slot.load_error is not None
    assert asyncio.run(slot.reload()) is False  # still nothing there
    assert "reload refused, still no model" in capsys.readouterr().err
    point(link, export_tiny_model(tmp_path / "single"))
    assert asyncio.run(slot.reload()) is True
    assert slot.predictor is not None and slot.load_error is None and slot.version is not None


def test_a_reload_to_a_text_pair_model_is_refused_and_the_served_one_answers_on(tmp_path, capsys):
    link = tmp_path / "current"
    link.symlink_to(export_tiny_model(tmp_path / "single"))
    slot = slot_on(link)
    asyncio.run(slot.load())
    served = slot.version
    point(link, export_tiny_model(tmp_path / "pairs", text_pair_column="text_pair"))
    assert asyncio.run(slot.reload()) is False
    err = capsys.readouterr().err
    assert f"reload refused, {served} keeps serving: the new model classifies text pairs, the served one single " \
           "texts" in err and "restart the server" in err
    assert slot.version == served and not slot.predictor.meta.takes_text_pair
    assert slot.predictor.predict(["好"])[0].label in ("负面", "正面")
