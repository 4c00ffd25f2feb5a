"""Learners calling their functions badly get an error naming what was wrong, never a silent broadcast."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.mark.parametrize("name", ["dot_loop", "dot"])
def test_mismatched_lengths_name_both_shapes(sol01, name):
    with pytest.raises(ValueError, match=rf"{name}: x has shape \(3,\), w has shape \(4,\); .*same length"):
        sol01[name](torch.ones(3), torch.ones(4))


@pytest.mark.parametrize("name", ["dot_loop", "dot", "neuron"])
def test_broadcastable_shapes_are_rejected_not_broadcast(sol01, name):
    args = (torch.ones(1), torch.ones(5)) + ((0.0,) if name == "neuron" else ())
    with pytest.raises(ValueError, match="same length"):
        sol01[name](*args)


def test_matrix_instead_of_vector(sol01):
    with pytest.raises(ValueError, match=r"dot: x must be a 1-D vector, got shape \(2, 3\) \(2-D\)"):
        sol01["dot"](torch.ones(2, 3), torch.ones(3))


def test_list_input_says_to_wrap_it(sol01):
    with pytest.raises(TypeError, match=r"dot: x must be a torch.Tensor, got list \(wrap it with torch.tensor"):
        sol01["dot"]([1.0, 2.0], torch.ones(2))


def test_numpy_input_says_to_convert_it(sol01):
    with pytest.raises(TypeError, match=r"got ndarray \(convert it with torch.from_numpy"):
        sol01["dot"](np.ones(2), torch.ones(2))


def test_integer_tensor_is_rejected_with_the_fix(sol01):
    with pytest.raises(TypeError, match=r"must be floating point .* got torch.int64; convert it with x.float\(\)"):
        sol01["dot"](torch.arange(3), torch.ones(3))


def test_mixed_dtypes_are_rejected(sol01):
    with pytest.raises(TypeError, match="x is torch.float32 but w is torch.float64"):
        sol01["dot"](torch.ones(3), torch.ones(3, dtype=torch.float64))


def test_bias_must_be_a_scalar(sol01):
    with pytest.raises(
        TypeError, match=r"neuron: b must be a number or a one-element tensor, got Tensor of shape \(3,\)"
    ):
        sol01["neuron"](torch.ones(3), torch.ones(3), torch.ones(3))


def test_keys_of_the_wrong_width(sol01):
    with pytest.raises(ValueError, match=r"query has shape \(4,\) and keys has shape \(10, 5\); keys must be \(N, 4\)"):
        sol01["cosine_similarity"](torch.ones(4), torch.ones(10, 5))


@pytest.mark.parametrize(
    "k, error, text",
    [
        (0, ValueError, r"k=0 but there are 3 keys; ask for 1 <= k <= 3"),
        (4, ValueError, r"k=4 but there are 3 keys"),
        (1.0, TypeError, r"k must be an int, got float"),
    ],
)
def test_top_k_with_a_bad_k(sol01, k, error, text):
    with pytest.raises(error, match=text):
        sol01["top_k"](torch.ones(2), torch.ones(3, 2), k)
