"""The models: encoder folders (PaddleNLP, Hugging Face, SentencePiece; `backbone`), the networks over an encoder
(the classifier with a linear or prototype head, the pretraining heads; `networks`), conversion from Hugging Face
(`convert`), vocabulary trimming (`trim`) and the tree of labels (`hierarchy`, which the inference side reads too:
this file imports nothing, so loading it loads no model code)."""
