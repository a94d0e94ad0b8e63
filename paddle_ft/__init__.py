"""paddle_ft: fine-tune, export and serve BERT-family Chinese text classifiers on PaddlePaddle."""

__version__ = "0.1.0"
