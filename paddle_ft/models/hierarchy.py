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
    def _membership(self) -> list[np.ndarray]:
        """Per level, [leaves, nodes] float32: 1 where the leaf is under the node."""
        return [np.eye(len(names), dtype=np.float32)[ids] for names, ids in zip(self.names, self._node_of)]

    def marginals(self, probabilities: np.ndarray, level: int) -> np.ndarray:
        """[texts, nodes of `level`]: each node's probability, the sum of its leaves' (of a softmax over leaves)."""
        return probabilities @ self._membership[level - 1]

    def sets(self, chosen: np.ndarray, level: int) -> np.ndarray:
        """[texts, nodes of `level`] bool: the nodes above any chosen leaf ([texts, leaves] bool, multi-label)."""
        return (chosen.astype(np.float32) @ self._membership[level - 1]) > 0

    def path(self, probabilities: np.ndarray) -> list[tuple[str, float]]:
        """The most probable leaf's path, top first: (node, its probability) per level ([leaves] of one text)."""
        leaf = int(np.argmax(probabilities))
        nodes = [(level, self.node_ids(level)[leaf]) for level in range(1, self.depth + 1)]
        return [(self.names[level - 1][node], float(self.marginals(probabilities[None, :], level)[0, node]))
                for level, node in nodes]

    def answer(self, probabilities: np.ndarray, abstain_below: float) -> tuple[str, float] | None:
        """The deepest level's most probable node whose probability reaches `abstain_below` ([leaves] of one text):
        a leaf when the model is sure of it, its parent (or grandparent...) when only that is sure; None when no
        level is."""
        for level in range(self.depth, 0, -1):
            nodes = self.marginals(probabilities[None, :], level)[0]
            best = int(np.argmax(nodes))
            if nodes[best] >= abstain_below:
                return self.names[level - 1][best], float(nodes[best])
        return None

def labelled_parents(labels, separator: str) -> list[str]:
    """The labels that are also the parent of another label (sorted): not a tree of leaves."""
    inner = {separator.join(parts[:depth]) for parts in (label.split(separator) for label in labels)
             for depth in range(1, len(parts))}
    return sorted(inner & set(labels))


def hierarchy_of(labels: tuple[str, ...], separator: str | None) -> Hierarchy | None:
    return None if separator is None else Hierarchy(labels, separator)
