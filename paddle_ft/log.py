"""One way to print a progress line: through tqdm, so that an open progress bar stays intact."""
from tqdm import tqdm


def log(message: str) -> None:
    tqdm.write(message)
