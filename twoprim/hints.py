"""Hints for every graded function, revealed one at a time: `hints("dot")` shows a button, `hint("dot")` prints the
next one. Each function has two or three, from what to look at, to which shape to build, to which identity to use;
none is solution code. Revealing a hint never changes a grade; the count is kept in `.twoprim-progress.json` at the
course root (read by `./course progress`).
"""
from __future__ import annotations

import difflib
import html
import re
from pathlib import Path

from .notebooks import ROOT

__all__ = ["HINTS", "hint", "hints", "resolve", "used"]

# grade id of the visible check -> hints, least detailed first.
HINTS: dict[str, tuple[str, ...]] = {
    # ex01_dot ---------------------------------------------------------------------------------------------------
    "ex01_dot-dot_loop": (
        "Look at the loop version in lesson 01: one index i runs over the length of x, and every step is Python "
        "arithmetic on single numbers, no tensor operation.",
        "Keep a running total as a Python float that starts at zero. Turn x[i] and w[i] into Python floats with "
        "`float(...)` before you multiply them, so nothing vectorised runs.",
        "x·w = x₀w₀ + x₁w₁ + … + xₙ₋₁wₙ₋₁, one term added per iteration. Return the float itself, not a tensor.",
    ),
    "ex01_dot-dot": (
        "Two whole-tensor operations are enough: which element-wise operation pairs xᵢ with wᵢ, and which "
        "reduction adds up the n results?",
        "The element-wise product has shape (n,), like x; reducing it over everything gives shape (), a 0-d tensor "
        "that keeps x's dtype.",
        "x·w = Σᵢ (x ⊙ w)ᵢ, the sum of the element-wise (Hadamard) product: `*` between two tensors multiplies "
        "element by element, and `.sum()` with no dimension adds everything.",
    ),
    "ex01_dot-neuron": (
        "You already wrote the hard part: a neuron's pre-activation is your dot product plus one number.",
        "`dot(x, w)` is a 0-d tensor; adding b, a number or a 0-d tensor, gives a 0-d tensor again.",
        "z = x·w + b. Call the `dot` you defined above, not a built-in, so the rules of `dot` still hold.",
    ),
    "ex01_dot-cosine_similarity": (
        "Split the formula in two: the numerators q·kⱼ for every key, and the denominators ‖q‖‖kⱼ‖ for every key. "
        "Each is one vectorised expression.",
        "keys (N, D) times query (D,) is a matrix-vector product of shape (N,): all numerators at once. The norms "
        "of the rows of keys form an (N,) vector; the query's norm is 0-d and broadcasts.",
        "cos = (K q) / max(‖kⱼ‖‖q‖, 1e-8). `torch.linalg.vector_norm` with `dim=1` gives row norms, and "
        "`clamp_min` applies the floor, so an all-zero key gets 0 / 1e-8 = 0.",
    ),
    "ex01_dot-top_k": (
        "Rank by your `cosine_similarity`: the answer is the positions of the largest similarities, largest first.",
        "Sorting the (N,) similarities in decreasing order also gives the permutation of indices, shape (N,); keep "
        "its first k entries.",
        "Ties keep index order only with a stable sort: `torch.sort` takes `stable=True` (and `descending=True`), "
        "`torch.topk` promises nothing about ties. The sort's `.indices` are what you return.",
    ),
    # ex02_gemm --------------------------------------------------------------------------------------------------
    "ex02_gemm-matmul_loops": (
        "Three nested loops: i over the rows of A (M), j over the columns of B (N), and k over the shared dimension "
        "(K). Only the innermost loop adds.",
        "Read the numbers out once with `.tolist()` (nested Python lists), make an (M, N) result tensor of A's "
        "dtype, and write each finished C[i, j] into it.",
        "C[i, j] = Σₖ A[i, k]·B[k, j], accumulated in a Python float that starts again at 0 for every (i, j).",
    ),
    "ex02_gemm-matmul_dots": (
        "Which two vectors meet in C[i, j]? Row i of A and column j of B, both of length K.",
        "Two loops, i over M and j over N, and one `torch.dot` per pair: row i of A is (K,), column j of B is (K,), "
        "and their dot is a 0-d tensor you store at C[i, j] of an (M, N) result.",
        "C[i, j] = A[i, :]·B[:, j]: M·N dots of length K, exactly what the check counts.",
    ),
    "ex02_gemm-matmul_outer": (
        "Turn the loops inside out: loop over k only, and let each step update all of C at once.",
        "Column k of A is (M,) and row k of B is (N,); their outer product is (M, N), the shape of C. Start C at "
        "zeros and add one outer product per k.",
        "C = Σₖ A[:, k] ⊗ B[k, :] with (u ⊗ v)ᵢⱼ = uᵢvⱼ: `torch.outer(u, v)`, or a column (M, 1) times a row "
        "(1, N) by broadcasting.",
    ),
    "ex02_gemm-gemm": (
        "Three parts of BLAS's contract: the product A·B once, scaled by alpha; beta·C added only when beta is not "
        "0; and C itself never changed.",
        "A (M, K) @ B (K, N) is (M, N), the shape of C. An expression such as alpha · product + beta · C builds a "
        "new tensor, so C stays as it was (no `+=` on C).",
        "When beta == 0, return alpha times the product without touching C at all: 0·NaN is NaN in IEEE "
        "arithmetic, so multiplying C by 0 is not the same as not reading it.",
    ),
    "ex02_gemm-matmul_tiled": (
        "Three loops again, but over the corners of tiles: rows of C, columns of C and the shared K, each stepping "
        "by `tile` (`range(0, M, tile)` and so on).",
        "For corners i0, j0, k0: take the tile of A at rows i0…, columns k0… and the tile of B at rows k0…, "
        "columns j0…, each at most tile long, and add their product into C's tile at rows i0…, columns j0…. A slice "
        "that runs past the end stops at the edge, so the last tiles come out smaller by themselves.",
        "Block matrix identity: C[i0, j0] = Σ over k0 of A[i0, k0] · B[k0, j0], each a plain `@` on tiles, "
        "accumulated into the same tile of a C that starts at zeros.",
    ),
    "ex02_gemm-gemm_flops": (
        "Count one dot product first: a dot of length K has K multiplications and K additions (counting the add "
        "into the running total).",
        "C has M·N elements, and each one is a dot product of length K.",
        "A multiply-add is 2 FLOPs, so the product costs 2 FLOPs per term and has M·N·K terms. Return a Python "
        "int.",
    ),
    # ex03_layers ------------------------------------------------------------------------------------------------
    "ex03_layers-linear": (
        "One GEMM must cover every row of x whatever its rank: fold the leading dimensions into one, multiply, "
        "then give them back.",
        "`reshape(-1, in)` turns x into (M, in), M the product of the leading dimensions; `W.T` is (in, out); the "
        "GEMM gives (M, out), which reshapes to x's leading dimensions followed by out.",
        "y = b + x Wᵀ: `torch.addmm(input, mat1, mat2)` computes input + mat1 @ mat2 in one call, with the bias "
        "broadcast over the rows.",
    ),
    "ex03_layers-qkv_projection": (
        "The three projections read the same x: stack the three weights so that one GEMM does all of them.",
        "`torch.cat` of Wq (dq, in), Wk (dk, in) and Wv (dv, in) along dimension 0 is (dq + dk + dv, in). The rows "
        "of x, (M, in), times its transpose give (M, dq + dk + dv).",
        "x [Wq; Wk; Wv]ᵀ = [x Wqᵀ, x Wkᵀ, x Wvᵀ] side by side: cut the columns apart with `.split([dq, dk, dv], "
        "dim=1)` and reshape each to x's leading dimensions.",
    ),
    "ex03_layers-mlp": (
        "No new GEMM code: the block is your `linear` twice with a ReLU in between.",
        "(..., in) → linear with W1, b1 → (..., hidden) → ReLU → linear with W2, b2 → (..., out).",
        "ReLU is element-wise (`torch.relu`), so it keeps the shape; each of the two `linear` calls is one GEMM over "
        "all rows, which is exactly the two GEMMs the check expects.",
    ),
    "ex03_layers-embedding_as_gemm": (
        "Picking row ids[i] of the table is multiplying the table by a row vector that is 0 everywhere except for a "
        "1 at position ids[i].",
        "Flatten ids to n entries and build an (n, V) one-hot matrix in the table's dtype; (n, V) @ (V, D) is "
        "(n, D); reshape to ids' shape followed by D, which also covers a single 0-d id.",
        "A one-hot matrix without a gather: compare the ids as a column (n, 1) with `torch.arange(V)`, shape (V,). "
        "Broadcasting gives an (n, V) boolean matrix, True exactly where the column index equals the id; convert it "
        "to the table's dtype.",
    ),
    "ex03_layers-rnn_cell": (
        "Two products add up inside the tanh, x W_ihᵀ and h W_hhᵀ: two GEMMs over all rows, or one.",
        "For one GEMM: concatenate x (..., in) and h (..., hidden) along the features and fold the rows, giving "
        "(M, in + hidden); concatenate W_ih (hidden, in) and W_hh (hidden, hidden) along dimension 1, giving "
        "(hidden, in + hidden).",
        "[x, h] [W_ih, W_hh]ᵀ = x W_ihᵀ + h W_hhᵀ (block multiplication). Add b, apply `torch.tanh`, and reshape "
        "back to h's shape.",
    ),
    "ex03_layers-gnn_layer": (
        "Both orders give the same H; the check accepts only the cheaper one. Which feature count multiplies the "
        "N² term in each order?",
        "(A X) W costs 2N²·F_in + 2N·F_in·F_out and A (X W) costs 2N·F_in·F_out + 2N²·F_out. F_in is the first "
        "size of W and F_out the second.",
        "Associativity: (A X) W = A (X W). When F_out < F_in shrink the features first (X times W, then A times "
        "that); otherwise mix the nodes first.",
    ),
    # ex04_conv --------------------------------------------------------------------------------------------------
    "ex04_conv-im2col": (
        "Read `conv.im2col_spec` (the cell above prints it) and compare your result with it on a tiny input such "
        "as `torch.arange(32.).reshape(1, 2, 4, 4)`: the order of the rows (channel, then kernel row, then kernel "
        "column) is what usually goes wrong.",
        "Pad first with `F.pad`, then take sliding windows with `Tensor.unfold` on the height, then on the width: a "
        "view of shape (N, C, Hout, Wout, window height, window width). Move the two window axes in front of the "
        "two position axes, then reshape to (N, C·kh·kw, Hout·Wout).",
        "Dilation: a window of size d·(k − 1) + 1 covers the dilated kernel's footprint, and slicing it with step d "
        "keeps exactly its k taps. The stride is `unfold`'s step.",
    ),
    "ex04_conv-conv_gemm_shape": (
        "Three numbers: M counts one group's output channels, N counts the output positions of the whole batch, K "
        "is the length of one column of one group.",
        "You need Hout and Wout first. Per spatial dimension: Hout = ⌊(H + 2·padding − dilation·(k − 1) − 1) / "
        "stride⌋ + 1.",
        "M = O / groups, N = batch · Hout · Wout, K = (C / groups) · kh · kw; the weight's shape already holds "
        "C / groups as its second entry.",
    ),
    "ex04_conv-conv2d_gemm": (
        "Three steps: columns from your `im2col`, one GEMM per group (that group's weights times that group's "
        "columns), then the output's shape and the bias.",
        "im2col gives (N, C·kh·kw, L) with L = Hout·Wout. Group g owns a contiguous block of K rows of each "
        "sample's columns: reshape to (N, groups, K, L) and move the axes to (groups, K, N·L) so every sample "
        "sits side by side in one GEMM. The weight reshapes to (groups, M, K).",
        "(groups, M, K) @ (groups, K, N·L) is one batched GEMM of shape (groups, M, N·L), which is (O, N, Hout, "
        "Wout) after a reshape. Bring the batch axis to the front, then add the bias broadcast as (1, O, 1, 1).",
    ),
    # ex05_attention ---------------------------------------------------------------------------------------------
    "ex05_attention-softmax": (
        "Three steps along `dim`: subtract the maximum, exponentiate, divide by the sum. Keep the reduced dimension "
        "so it broadcasts back.",
        "With `keepdim=True`, the maximum along dim has x's shape with size 1 along dim, so subtracting it "
        "broadcasts over x; the sum of the exponentials works the same way.",
        "softmax(x) = softmax(x − c) for any c constant along dim, because e^(−c) cancels. With c the maximum, "
        "every exponential is at most 1, nothing overflows, and a −inf entry becomes exp(−inf) = 0.",
    ),
    "ex05_attention-layer_norm": (
        "Two reductions over the last dimension: the mean, then the variance of the centred values.",
        "With `keepdim=True` the mean and the variance are (..., 1) and broadcast over (..., E); weight and bias "
        "(E,) broadcast over the leading dimensions.",
        "σ² = mean((x − μ)²), dividing by E, not E − 1; y = (x − μ) / √(σ² + eps) · weight + bias. Avoid "
        "mean(x²) − μ²: it cancels catastrophically in float32 when a row sits far from zero.",
    ),
    "ex05_attention-attention": (
        "Five steps: scores, scale, mask, softmax (yours), weighted sum of v. Read "
        "`twoprim.attention.attention_spec` when unsure what a mask means.",
        "`k.transpose(-2, -1)` is (B, H, D, S), so q @ it is (B, H, S, S), one batched GEMM; (B, H, S, S) @ v "
        "(B, H, S, D) is the second. For causal, a lower-triangular (S, S) boolean matrix (`.tril()` of a matrix "
        "of True) says which keys each query keeps.",
        "Hidden scores become −inf: `masked_fill` for a boolean mask or a causal one, `+` for an additive mask. A "
        "row with every key hidden gives 0/0 = NaN in the softmax; find the rows whose largest score is −inf and "
        "put zeros there with `torch.where`, as SDPA does.",
    ),
    "ex05_attention-multi_head_attention": (
        "Four GEMMs: one for q, k and v together, two inside your `attention`, one for the output projection. "
        "Everything else is reshaping.",
        "x @ W_qkvᵀ is (B, S, 3E); split it into three (B, S, E) along the last dimension; reshape each to "
        "(B, S, H, D), then `transpose(1, 2)` to (B, H, S, D).",
        "Putting the heads back is the inverse: (B, H, S, D) → (B, S, H, D) → (B, S, E), then the product with "
        "W_oᵀ. Reshaping E into (H, D) gives head h the features h·D to h·D + D − 1, as nn.MultiheadAttention "
        "does.",
    ),
    "ex05_attention-tiled_attention": (
        "Two loops: blocks of queries outside, blocks of keys inside. Each query block carries three running "
        "tensors: the maximum m, the sum ℓ and the unnormalised output a.",
        "For a block of Bq queries, m and ℓ are (B, H, Bq, 1) and a is (B, H, Bq, D); a tile of scores is "
        "(B, H, Bq, Bk), never (S, S). Start m at −inf and ℓ and a at zero; write a / ℓ into the output rows "
        "after the last key block.",
        "Online softmax: m' = max(m, row max of s), p = exp(s − m'), α = exp(m − m'); then ℓ ← α·ℓ + row sum of "
        "p and a ← α·a + p·v_blk. For causal, mask a tile with its own row and column indices (column > row "
        "becomes −inf) and stop the key loop at the diagonal.",
    ),
    "ex05_attention-attention_flops": (
        "No tensors here, only arithmetic on B, H, S and D: count the two GEMMs and the six element-wise and "
        "reduction steps separately.",
        "q·kᵀ is B·H GEMMs of shape (S, D) @ (D, S), and p·v is B·H GEMMs of shape (S, S) @ (S, D). The scores "
        "tensor has B·H·S·S entries.",
        "A GEMM (M, K) @ (K, N) costs 2·M·N·K FLOPs. 'other' is one FLOP per score for each of the six steps; "
        "return both as plain ints in a dict.",
    ),
    # ex06_compile -----------------------------------------------------------------------------------------------
    "ex06_compile-count_ops": (
        "Print `graph_module.code`, then loop over `graph_module.graph.nodes` and look at each node's `op` and "
        "`target`.",
        "Only nodes whose `op` is 'call_function' or 'call_method' count. For 'call_method' the target is already "
        "the name (a string); for 'call_function' it is a function or an ATen op.",
        "An ATen op such as `torch.ops.aten.addmm.default` has an `overloadpacket` whose `__name__` is 'addmm'; a "
        "plain Python function has its own `__name__`. Count names in a `Counter`.",
    ),
    "ex06_compile-capture": (
        "`torch.compile(model, backend=...)` hands every graph it builds to the backend: a function of yours can "
        "keep each graph in a list and return something that runs it.",
        "Level 'dynamo': a backend taking (gm, example_inputs) that keeps gm and returns the graph's own forward "
        "method. Level 'aten': `aot_autograd` with a forward compiler and a backward compiler of that kind, one list "
        "for forward graphs and one for backward graphs, each returning the forward method wrapped by "
        "`make_boxed_func`.",
        "Reset Dynamo first (`torch._dynamo.reset`), or it reuses code compiled earlier. For train=False run the compiled model under `torch.no_grad()`; for "
        "train=True call `.sum().backward()` on its output, which is when the backward graphs are compiled. "
        "Return the forward graphs, then the backward ones.",
    ),
    "ex06_compile-gemm_count": (
        "You already have both pieces: `capture` gives the graphs and `count_ops` counts the names in each.",
        "`GEMM_OPS[level]` is the set of names that are GEMMs at that level; add up their counts over every graph.",
        "Total = Σ over graphs Σ over names in GEMM_OPS[level] of the graph's count for that name. A `Counter` "
        "gives 0 for a name it never saw, so no special case is needed.",
    ),
    "ex06_compile-forward_gemms": (
        "Measure, do not guess: in a cell of your own, call your `gemm_count` on `model` and `x` from the setup "
        "cell at level 'aten' with train=False.",
        "Print the `.code` of each graph `capture` returns: every `nn.Linear` with a bias becomes one ATen op; "
        "lesson 06 shows this MLP's ATen graph.",
    ),
    "ex06_compile-backward_gemms": (
        "Measure with `capture(model, x, 'aten', train=True)`: the graphs after the forward ones are the backward; "
        "count their GEMM ops with `count_ops`.",
        "The backward of y = x Wᵀ + b needs one GEMM per gradient it computes: each layer's weight gradient, and "
        "the gradient flowing into the layer below it, but none for an input that does not require grad.",
    ),
    "ex06_compile-backward_gemms_input_grad": (
        "The same measurement as `backward_gemms`, with `x.clone().requires_grad_()` as the input.",
        "An input that requires grad adds one gradient to compute, ∂L/∂x of the first layer: how many GEMMs is "
        "that?",
    ),
    "ex06_compile-no_bias_gemms": (
        "Capture the ATen forward graph of `ex06.MLP(16, 32, 8, bias=False)` and count its ops; keep only the names "
        "in `GEMM_OPS['aten']`.",
        "The answer is a dict {op name: count}. Without a bias there is nothing for `addmm` to add: which plain "
        "GEMM op does each layer become?",
    ),
    "ex06_compile-graph_break_graphs": (
        "Count the graphs your `capture` returns for `ex06.MLPWithBreak(16, 32, 8)` at level 'dynamo'.",
        "Read its forward (`inspect.getsource(ex06.MLPWithBreak.forward)`): an `if` on a tensor's value needs a "
        "real Python bool, so Dynamo ends the graph there and starts another after it.",
    ),
    # ex07_mlx ---------------------------------------------------------------------------------------------------
    "ex07_mlx-mlx_dot": (
        "MLX has its own dot product; the check wants exactly one `Matmul` primitive, not a `Multiply` and a sum.",
        "Two (n,) vectors give a 0-d array: `mx.inner`, `mx.matmul` and `@` each do it in one primitive.",
        "Return the lazy result as it is: no `mx.eval`, `.item()` or `print` inside the function.",
    ),
    "ex07_mlx-mlx_gemm": (
        "Two cases: beta == 0, where C must not be read at all, and every other beta.",
        "The general case is one call: `mx.addmm` takes C, A, B and the keyword arguments alpha and beta, and "
        "returns a new array. Never write into C.",
        "For beta == 0, scale the plain product (M, K) @ (K, N) → (M, N) by alpha and leave C out entirely, since "
        "0·NaN is NaN.",
    ),
    "ex07_mlx-mlx_attention": (
        "The same steps as attention in torch: scores, scale by 1/√D, the causal mask, your own stable softmax, "
        "the weighted sum of v; two `@` in all.",
        "`k.swapaxes(-1, -2)` is (B, H, D, S), so q @ it is (B, H, S, S). For causal, compare `mx.arange(S)` as a "
        "column with itself as a row to get an (S, S) boolean, and let `mx.where` put −inf where a key comes after "
        "the query.",
        "Stable softmax: subtract each row's maximum (`max` with `axis=-1, keepdims=True`), `mx.exp`, divide by "
        "the row sum. Then weights (B, H, S, S) @ v (B, H, S, D).",
    ),
    "ex07_mlx-mlx_op_counts": (
        "Evaluate nothing: `mx.export_function` takes a callback, the function and its example arguments; it traces "
        "the function and calls the callback once per entry of the graph.",
        "Make a `Counter` before tracing, and let a callback defined inside your function add to it.",
        "Count only the entries whose 'type' is 'primitive', under their 'name'; return the Counter once "
        "`export_function` has returned.",
    ),
    "ex07_mlx-lazy_answer": (
        "Measure in a new cell: run the scenario's four lines again, then export the graph behind y "
        "(`mx.export_to_dot`, as lesson 07 does) and count its primitive nodes.",
        "After `mx.eval(y)` nothing is pending behind y. With `mx.eval(model.parameters())` before "
        "`y = model(x)`, the parameters' random initialisation has already run; without it, it is pending too.",
        "A primitive with several outputs counts once: count primitive nodes, not arrays. Write the three whole "
        "numbers into the dict `lazy_answer` returns.",
    ),
    # ex08_triton ------------------------------------------------------------------------------------------------
    "ex08_triton-add_kernel": (
        "Lesson 09's vector add is the pattern: each program owns one block of indices, found from its program id "
        "and `tl.arange`, and the wrapper launches as many programs as there are blocks.",
        "Element i of x lives at `x_ptr + i * stride_x`, whatever its layout. A boolean mask comparing the indices "
        "with n keeps the last, partial block from reading or writing past the end.",
        "The wrapper only allocates the output (`torch.empty`, x's dtype) and launches: the grid is a tuple with "
        "`triton.cdiv(n, BLOCK)` programs, and the kernel's BLOCK is passed by keyword.",
    ),
    "ex08_triton-softmax_kernel": (
        "One program per row, and the whole row fits in one block: BLOCK_N is the next power of two at or above N, "
        "and the mask covers the padding.",
        "Padding must not change the result: load it as minus infinity, since exp of that is 0. Element (i, j) is "
        "at `x_ptr + i * stride_xm + j * stride_xn`.",
        "Convert the loaded row to float32 before any arithmetic, subtract its maximum so exp never overflows, and "
        "divide by the sum; the store converts back to the output's dtype.",
    ),
    "ex08_triton-matmul_kernel": (
        "Each program computes one (BLOCK_M, BLOCK_N) tile of C; the grid is two-dimensional, one axis for blocks "
        "of rows and one for blocks of columns.",
        "Inside, a Python `for` loop walks K in steps of BLOCK_K. Row offsets as a column (`[:, None]`) plus column "
        "offsets as a row (`[None, :]`) give a 2-D block of pointers; a mask of the same shape with `other=0.0` "
        "makes the ragged edges contribute nothing.",
        "Start from a float32 block of zeros and add `tl.dot` of the A block and the B block at every step; convert "
        "to C's element type only in the final `tl.store`, masked to rows < M and columns < N.",
    ),
}


def resolve(name: str) -> str:
    """The grade id for `name`: a grade id itself ("ex01_dot-dot") or a function name ("dot") of one assignment."""
    if name in HINTS:
        return name
    found = [gid for gid in HINTS if gid.split("-", 1)[1] == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(f"{name!r} is graded in several assignments ({', '.join(found)}); pass one of those ids")
    names = sorted({gid.split("-", 1)[1] for gid in HINTS})
    close = difflib.get_close_matches(name, names, n=3)
    maybe = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(f"no hints for {name!r}: hints exist for the graded functions {', '.join(names)}.{maybe}")


def used(root: Path = ROOT) -> dict[str, int]:
    """grade id -> how many of its hints the learner has revealed (from the progress state file)."""
    from .progress import load_state

    return dict(load_state(root)[0]["hints"])


def _record(gid: str, number: int, root: Path) -> str | None:
    """Remember that hint `number` of `gid` was revealed; never raises (a hint is worth more than its count)."""
    from .progress import update_state

    def change(data: dict) -> None:
        data["hints"][gid] = max(int(data["hints"].get(gid, 0)), number)

    try:
        return update_state(root, change)
    except OSError as err:
        return f"could not record the hint in {root}: {err}"


def _format(gid: str, number: int) -> str:
    total = len(HINTS[gid])
    return f"Hint {number} of {total} for {gid}: {HINTS[gid][number - 1]}"


def hint(name: str, number: int | None = None, *, root: Path = ROOT) -> None:
    """Print the next hint for graded function `name` (or hint `number` again); never changes a grade."""
    from .progress import load_state

    gid = resolve(name)
    total = len(HINTS[gid])
    data, note = load_state(root)
    if number is None:
        number = min(data["hints"].get(gid, 0) + 1, total)
    if not 1 <= number <= total:
        raise ValueError(f"{gid} has hints 1 to {total}; you asked for hint {number}")
    note = _record(gid, number, root) or note
    print(_format(gid, number))
    if number == total:
        print(f"That is the last hint. hint({name!r}, 1) shows the first again; the lesson named at the top of the "
              f"assignment covers the rest.")
    if note:
        print(f"note: {note}")


def _html(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def hints(*names: str, root: Path = ROOT):
    """A button per graded function in `names` that reveals its hints one at a time (ipywidgets; in a terminal, use
    `hint(name)`)."""
    import ipywidgets as widgets

    if not names:
        raise ValueError('name the graded functions to show hints for, e.g. hints("dot")')
    gids = [resolve(n) for n in names]
    boxes = []
    for gid in gids:
        total = len(HINTS[gid])
        button = widgets.Button(description=f"Show hint 1 of {total}", tooltip=f"hints for {gid}; grades unchanged",
                                layout=widgets.Layout(width="auto"))
        shown = widgets.HTML()
        state = {"n": 0}

        def reveal(_, gid=gid, total=total, button=button, shown=shown, state=state):
            state["n"] += 1
            note = _record(gid, state["n"], root)
            shown.value += f"<p><b>Hint {state['n']}.</b> {_html(HINTS[gid][state['n'] - 1])}</p>"
            if note:
                shown.value += f"<p><i>{html.escape(note)}</i></p>"
            if state["n"] == total:
                button.description, button.disabled = "No more hints", True
            else:
                button.description = f"Show hint {state['n'] + 1} of {total}"

        button.on_click(reveal)
        label = widgets.HTML(f"Stuck on <code>{gid.split('-', 1)[1]}</code>? Hints never change your grade.")
        boxes.append(widgets.VBox([widgets.HBox([label, button]), shown]))
    return widgets.VBox(boxes)
