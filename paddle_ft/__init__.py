"""paddle_ft: fine-tune, export and serve BERT-family Chinese text classifiers on PaddlePaddle."""

__version__ = "0.1.0"


def __getattr__(name):
    # `paddle_ft.Predictor` / `paddle_ft.Classifier` without importing paddle for code that only needs,
    # say, the demo data.
    if name == "Predictor":
        from paddle_ft.infer import Predictor

        return Predictor
    if name == "Classifier":
        from paddle_ft.classifier import Classifier

        return Classifier
    raise AttributeError(f"module 'paddle_ft' has no attribute {name!r}")
