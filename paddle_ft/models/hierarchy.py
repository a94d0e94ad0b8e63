"""`Hierarchy`: labels written as paths of a tree (`电子/手机`), and what a model over the leaves says at each level.

The model is one softmax (or, multi-label, one sigmoid per label) over the leaves: a node's probability is the sum of
its leaves', so every answer is a path that exists (a leaf implies its parents) and the levels can never disagree.
A leaf shallower than the tree stands for itself at the deeper levels (`其他` is level 1's and level 2's `其他`).

Imports only numpy: the model's metadata, the metrics and the predictor all read it.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from paddle_ft.errors import UserError


class Hierarchy:
    def __init__(self, leaves: tuple[str, ...], separator: str):
        self.leaves, self.separator = tuple(leaves), separator
        paths = [leaf.split(separator) for leaf in self.leaves]
        for leaf, parts in zip(self.leaves, paths):
            if not all(part.strip() for part in parts):
                raise UserError(f"label {leaf!r} has an empty level between {separator!r}s; write it as a path of "
                                f"names, as 电子{separator}手机")
            padded = next((part for part in parts if part != part.strip()), None)
            if padded is not None:  # '电子 /电脑' would make a parent '电子 ' beside '电子'
                raise UserError(f"label {leaf!r} has blanks around the level name {padded!r}: remove them (as "
                                f"{separator.join(part.strip() for part in parts)}), else {padded!r} and "
                                f"{padded.strip()!r} are two different parents")
        parents = labelled_parents(self.leaves, separator)
        if parents:
            child = next(leaf for leaf in self.leaves if leaf.startswith(parents[0] + separator))
            raise UserError(f"label {parents[0]!r} is both a label and the parent of {child!r}: a text's label "
                            f"must be a leaf of the tree; label those texts down to a leaf (as "
                            f"{parents[0]}{separator}其他)")
        self.depth = max(len(parts) for parts in paths)
        # node ids of each leaf per level, and each level's node names in first-seen order
        self._node_of, self.names = [], []
        for level in range(1, self.depth + 1):
            nodes = [separator.join(parts[:level]) for parts in paths]
            names = tuple(dict.fromkeys(nodes))
            index = {name: i for i, name in enumerate(names)}
            self._node_of.append(np.array([index[node] for node in nodes], dtype=np.int64))
            self.names.append(names)

    def node_ids(self, level: int) -> np.ndarray:
        """[leaves]: the id of each leaf's node at `level` (1 = the top; `depth` = the leaf itself)."""
        return self._node_of[level - 1]

    @cached_property
    def _grouped(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per level, (the leaves in the order of their node ids, where each node's leaves start in it): a node's
        probability is a sum over a slice, so a tree of 20,000 leaves holds no [leaves, nodes] matrix."""
        grouped = []
        for ids in self._node_of:
            order = np.argsort(ids, kind="stable")
            grouped.append((order, np.searchsorted(ids[order], np.arange(int(ids.max()) + 1))))
        return grouped

    def marginals(self, probabilities: np.ndarray, level: int) -> np.ndarray:
        """[texts, nodes of `level`]: each node's probability, the sum of its leaves' (of a softmax over leaves)."""
        order, starts = self._grouped[level - 1]
        return np.add.reduceat(np.asarray(probabilities, dtype=np.float32)[:, order], starts, axis=1)

    def sets(self, chosen: np.ndarray, level: int) -> np.ndarray:
        """[texts, nodes of `level`] bool: the nodes above any chosen leaf ([texts, leaves] bool, multi-label)."""
        order, starts = self._grouped[level - 1]
        return np.logical_or.reduceat(np.asarray(chosen, dtype=bool)[:, order], starts, axis=1)

    def path(self, probabilities: np.ndarray) -> list[tuple[str, float]]:
        """The top label's path, top first: (node, its probability) per level ([leaves] of one text). The top label
        is the most probable leaf, as the flat answer's; `answer` decides on this path too, so one text gets one
        decoding (the answer is never a node off the path shown with it)."""
        leaf = int(np.argmax(probabilities))
        path = []
        for level in range(1, self.depth + 1):
            ids = self.node_ids(level)
            path.append((self.names[level - 1][ids[leaf]], float(probabilities[ids == ids[leaf]].sum())))
        return path

    def answer(self, probabilities: np.ndarray, abstain_below: float) -> tuple[str, float] | None:
        """The deepest node of the top label's `path` whose probability reaches `abstain_below` ([leaves] of one
        text): the leaf when the model is sure of it, its parent (or grandparent...) when only that is sure; None when
        no node of the path is. (A node off the path may sum to more than the path's node at its level: the answer
        still follows the top label, which is what the flat answer and the path say.)"""
        sure = [node for node in self.path(probabilities) if node[1] >= abstain_below]
        return sure[-1] if sure else None


def labelled_parents(labels, separator: str) -> list[str]:
    """The labels that are also the parent of another label (sorted): not a tree of leaves."""
    inner = {separator.join(parts[:depth]) for parts in (label.split(separator) for label in labels)
             for depth in range(1, len(parts))}
    return sorted(inner & set(labels))


def hierarchy_of(labels: tuple[str, ...], separator: str | None) -> Hierarchy | None:
    return None if separator is None else Hierarchy(labels, separator)
