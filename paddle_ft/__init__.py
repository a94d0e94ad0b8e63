"""paddle_ft: fine-tune, export and serve BERT-family Chinese text classifiers on PaddlePaddle."""

__version__ = "0.1.0"


def __getattr__(name):
    # `paddle_ft.Predictor`, `paddle_ft.Classifier`, `paddle_ft.Explainer`, `paddle_ft.train` and `paddle_ft.load`
    # without importing paddle for code that only needs, say, the demo data.
    if name in ("train", "load"):
        from paddle_ft import api

        return getattr(api, name)
    if name == "Predictor":
        from paddle_ft.inference.predictor import Predictor

        return Predictor
    if name == "Explainer":
        from paddle_ft.analysis.explain import Explainer

        return Explainer
    if name == "Classifier":
        from paddle_ft.inference.classifier import Classifier

        return Classifier
    raise AttributeError(f"module 'paddle_ft' has no attribute {name!r}")
