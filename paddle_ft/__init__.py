"""paddle_ft: fine-tune, export and serve BERT-family Chinese text classifiers on PaddlePaddle."""

__version__ = "0.1.0"


def __getattr__(name):
    # `paddle_ft.Predictor`, `paddle_ft.PredictOptions`, `paddle_ft.Classifier`, `paddle_ft.Explainer`,
    # `paddle_ft.train`, `paddle_ft.load`, `paddle_ft.use_fast_mkl` and `paddle_ft.UserError` without importing
    # paddle for code that only needs, say, the demo data.
    if name in ("train", "load"):
        from paddle_ft import api

        return getattr(api, name)
    if name == "use_fast_mkl":
        from paddle_ft.runtime import use_fast_mkl

        return use_fast_mkl
    if name == "Predictor":
        from paddle_ft.inference.predictor import Predictor

        return Predictor
    if name == "PredictOptions":
        from paddle_ft.inference.options import PredictOptions

        return PredictOptions
    if name == "Explainer":
        from paddle_ft.analysis.explain import Explainer

        return Explainer
    if name == "UserError":
        from paddle_ft.errors import UserError

        return UserError
    if name == "Classifier":
        from paddle_ft.inference.classifier import Classifier

        return Classifier
    raise AttributeError(f"module 'paddle_ft' has no attribute {name!r}")
