"""What a training run leaves and a model travels in, each with one owner: the run folder (`run`), a saved model
(`bundle`, `meta`) and an export (`export_folder`). docs/architecture.md has the map."""
