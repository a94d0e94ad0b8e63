"""Issue 65: the pieces of the Label Studio ML backend that need no running tool: which tags of a project's config the
answers go to, how a prediction becomes Label Studio's (abstaining, a tree's path, a label set), what the annotations
file gives a retraining, and the round's training file."""
import json

import numpy as np
import pytest

from paddle_ft.data import annotation
from paddle_ft.data.annotation import LabelSpace, label_config
from paddle_ft.errors import UserError
from paddle_ft.inference.predictor import Prediction
from paddle_ft.models.hierarchy import hierarchy_of
from paddle_ft.serve import label_studio
from paddle_ft.serve.label_studio import Tags, _prediction, read_tags
from paddle_ft.workflows.annotation_log import Annotated, AnnotationLog
from paddle_ft.workflows.retraining import Recipe, Retrainer

FLAT = LabelSpace(("负面", "正面"))
TREE = LabelSpace(("电子/手机", "电子/电脑", "服装"), path_separator="/")


def test_the_answer_goes_to_the_config_s_control_tag_and_the_config_must_offer_every_label():
    assert read_tags(label_config(FLAT, False)) == Tags("label", "text", "text", "choices", frozenset({"负面", "正面"}))
    assert read_tags(label_config(TREE, False)).offered == frozenset(TREE.names)
    own = ('<View><Text name="review" value="$content"/><Choices name="sentiment" toName="review">'
           '<Choice value="正面"/></Choices></View>')
    assert read_tags(own) == Tags("sentiment", "review", "content", "choices", frozenset({"正面"}))
    assert read_tags(None) == Tags()
    # the server side spells the written config's tag names itself (it imports no training code): the same ones
    assert (label_studio.FROM_NAME, label_studio.TO_NAME, label_studio.PAIR_KEY) == \
        (annotation.FROM_NAME, annotation.TO_NAME, annotation.PAIR_KEY)
    with pytest.raises(UserError, match="not XML"):
        read_tags("<View>")
    with pytest.raises(UserError, match="no Choices or Taxonomy tag"):
        read_tags('<View><Text name="t" value="$text"/><Labels name="l" toName="t"/></View>')


def single(vector, abstained=None, tree=None, answer=None):
    names = tree.leaves if tree else FLAT.names
    return Prediction(names, np.array(vector, dtype=np.float32), False, abstained=abstained, hierarchy=tree,
                      answer=answer)


def test_a_prediction_is_the_answer_and_its_score_and_an_abstention_gives_no_pre_annotation():
    tags = Tags("sentiment", "review")
    sure = _prediction(single([0.1, 0.9], abstained=False), tags, FLAT.result, "export@1")
    assert sure == {"result": [{"from_name": "sentiment", "to_name": "review", "type": "choices",
                                "value": {"choices": ["正面"]}}],
                    "score": pytest.approx(0.9), "model_version": "export@1"}
    unsure = _prediction(single([0.45, 0.55], abstained=True), tags, FLAT.result, "export@1")
    assert unsure["result"] == [] and unsure["score"] == pytest.approx(0.55)  # the lowest scores sort first

    tree = hierarchy_of(TREE.names, "/")
    parent = _prediction(single([0.5, 0.4, 0.1], abstained=True, tree=tree, answer=("电子", 0.9)), Tags(), TREE.result,
                         "v")
    assert parent["result"][0]["type"] == "taxonomy" and parent["result"][0]["value"] == {"taxonomy": [["电子"]]}
    leaf = _prediction(single([0.8, 0.1, 0.1], tree=tree), Tags(), TREE.result, "v")
    assert leaf["result"][0]["value"] == {"taxonomy": [["电子", "手机"]]}

    several = Prediction(("物流", "价格", "质量"), np.array([0.9, 0.6, 0.1], dtype=np.float32), False,
                         labels=("物流", "价格"))
    answer = _prediction(several, Tags(), LabelSpace(("物流", "价格", "质量"), multi_label=True).result, "v")
    assert answer["result"][0]["value"] == {"choices": ["物流", "价格"]} and answer["score"] == pytest.approx(0.6)


def test_a_task_s_labels_are_its_latest_annotation_that_was_not_deleted(tmp_path):
    folder = AnnotationLog(tmp_path)
    folder.record_annotation(7, 1, "t1", "很好", None, ("正面",))
    folder.record_annotation(8, 2, "t2", "太差", None, ("负面",))
    folder.record_annotation(7, 3, "t3", "很好", None, ("负面",))  # a second annotator, later
    folder.record_annotation(9, 4, "t4", "跳过", None, None)  # skipped
    assert folder.annotated() == [Annotated(7, "很好", None, ("负面",)), Annotated(8, "太差", None, ("负面",))]
    folder.record_deletion([3])
    assert folder.annotated()[0] == Annotated(7, "很好", None, ("正面",))  # the first annotation stands again
    folder.record_annotation(8, 2, "t5", "太差", None, None)  # updated to nothing chosen
    assert [a.task for a in folder.annotated()] == [7]


def test_a_round_trains_on_the_model_s_rows_with_the_annotated_texts_relabelled_and_added(tmp_path):
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n很好\t正面\n太差\t负面\n一般\t正面\n", encoding="utf-8")
    config = {"output_dir": "old", "data": {"train": str(train), "format": "tsv"}, "seed": 3}
    folder = AnnotationLog(tmp_path / "backend")
    folder.path.mkdir()
    logged = []
    retrainer = Retrainer(folder, Recipe(config, FLAT), 30, None, logged.append)
    round_folder = folder.new_round()
    annotated = [Annotated(1, "一般", None, ("负面",)), Annotated(2, "新的", None, ("正面",)),
                 Annotated(3, "怪", None, ("中性",)), Annotated(4, "两个", None, ("正面", "负面"))]
    path = retrainer._round_config(round_folder, annotated)
    rows = [json.loads(line) for line in (round_folder / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == [{"text": "很好", "label": "正面"}, {"text": "太差", "label": "负面"},
                    {"text": "一般", "label": "负面"}, {"text": "新的", "label": "正面"}]
    assert logged == ["retraining: task 3 left out: the label '中性' is not one of the model's",
                      "retraining: task 4 left out: a single-label model's text has one label"]
    import yaml
    written = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert path.name == "retrain.yaml" and written == {"output_dir": str(round_folder / "run"), "seed": 3,
                       "data": {"train": str(round_folder / "train.jsonl"), "format": None}}


def test_start_training_retrains_only_on_something_new_and_once_at_a_time(tmp_path):
    """Label Studio's "Start model training on annotation submission" asks at every submission: a request with no
    changed annotation starts nothing, and requests during a retraining make one more, not one each."""
    import asyncio

    log = AnnotationLog(tmp_path)
    retrainer = Retrainer(log, Recipe({}, FLAT), 30, None, print)
    rounds = []

    async def fake_round():
        rounds.append([a.task for a in log.annotated()])
        retrainer._trained_answers = log.annotated()
        await asyncio.sleep(0.05)

    retrainer._round = fake_round

    async def scenario():
        assert not retrainer.start()  # nothing annotated
        log.record_annotation(1, 1, "t", "很好", None, ("正面",))
        assert retrainer.start()
        await asyncio.sleep(0.01)
        log.record_annotation(2, 2, "t", "太差", None, ("负面",))
        assert retrainer.start() and retrainer.start()  # during the first: one more after it
        await asyncio.sleep(0.2)
        assert not retrainer.start()  # nothing changed since

    asyncio.run(scenario())
    assert rounds == [[1], [1, 2]]
