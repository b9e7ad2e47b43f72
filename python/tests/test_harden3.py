"""Hostile arguments to the Python package: ints outside int64, bools and
floats where ints go, non-tensors where tensors go, huge slice bounds, bool
indices. Each case raises the exception class PyTorch raises (compared with
torch directly where it is installed), naming the function and the argument;
nothing is truncated, wrapped or clamped into another valid value."""
import inspect
import os
import re

import numpy as np
import pytest

import anygrad as ag

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

BIG = 2 ** 63  # one past int64


def _err(fn, m):
    try:
        fn(m)
    except Exception as e:  # noqa: BLE001 - the class is the result
        return e
    return None


def _F(m):
    return m.nn.functional if m is torch else m.functional


def _t(m):
    return m.arange(6).reshape(3, 2)


def _f(m):
    return m.arange(6).reshape(3, 2).float()


def _img(m):
    return m.ones(1, 1, 4, 4)


# (id, fn(module), class anygrad must raise, regex its message must match).
# With torch present, torch must raise for the same call and anygrad's
# exception must be an instance of torch's class.
CASES = [
    # ints that do not fit int64: RuntimeError, "Overflow when unpacking long"
    ("tensor_2p63", lambda m: m.tensor([BIG]), RuntimeError, r"tensor\(\).*9223372036854775808.*Overflow"),
    ("tensor_2p63_0d", lambda m: m.tensor(BIG), RuntimeError, "Overflow"),
    ("tensor_2p64", lambda m: m.tensor([2 ** 64]), RuntimeError, "Overflow"),
    ("tensor_min_minus_1", lambda m: m.tensor([-BIG - 1]), RuntimeError, "Overflow"),
    ("tensor_nested", lambda m: m.tensor([[1, 2], [3, BIG]]), RuntimeError, "Overflow"),
    ("tensor_bool_and_big", lambda m: m.tensor([True, BIG]), RuntimeError, "Overflow"),
    ("tensor_i64_explicit", lambda m: m.tensor([BIG], dtype=m.int64), RuntimeError, "Overflow"),
    ("tensor_i32", lambda m: m.tensor([2 ** 31], dtype=m.int32), RuntimeError, "int32"),
    ("tensor_i32_low", lambda m: m.tensor([-2 ** 31 - 1], dtype=m.int32), RuntimeError, "int32"),
    ("tensor_u8", lambda m: m.tensor([256], dtype=m.uint8), RuntimeError, "uint8"),
    ("tensor_i64_from_float", lambda m: m.tensor([1.5e19], dtype=m.int64), RuntimeError, "int64"),
    ("index_2p63", lambda m: _t(m)[BIG], RuntimeError, "Overflow"),
    ("index_min_minus_1", lambda m: _t(m)[-BIG - 1], RuntimeError, "Overflow"),
    ("transpose_2p63", lambda m: _t(m).transpose(0, BIG), RuntimeError, r"transpose\(\).*dim1"),
    ("transpose_2p64", lambda m: _t(m).transpose(0, 2 ** 64), RuntimeError, "Overflow"),
    ("unsqueeze_2p63", lambda m: _t(m).unsqueeze(BIG), RuntimeError, r"unsqueeze\(\).*'dim'"),
    ("squeeze_2p63", lambda m: _t(m).squeeze(BIG), RuntimeError, r"squeeze\(\)"),
    ("sum_2p63", lambda m: m.sum(_t(m), BIG), RuntimeError, r"sum\(\)"),
    ("softmax_2p63", lambda m: m.softmax(_f(m), BIG), RuntimeError, r"softmax\(\)"),
    ("topk_k_2p63", lambda m: m.topk(_f(m), BIG), RuntimeError, r"topk\(\).*'k'"),
    ("topk_dim_2p63", lambda m: m.topk(_f(m), 1, BIG), RuntimeError, r"topk\(\).*'dim'"),
    ("size_2p63", lambda m: _t(m).size(BIG), RuntimeError, r"size\(\)"),
    ("manual_seed_2p64", lambda m: m.manual_seed(2 ** 64), RuntimeError, r"manual_seed\(\)"),
    ("manual_seed_low", lambda m: m.manual_seed(-BIG - 1), RuntimeError, r"manual_seed\(\)"),
    ("arange_2p63", lambda m: m.arange(BIG), RuntimeError, "Overflow"),
    ("add_2p63", lambda m: _t(m) + BIG, RuntimeError, "Overflow"),
    ("mul_float_2p70", lambda m: _f(m) * 2 ** 70, RuntimeError, "Overflow"),
    ("full_2p70", lambda m: m.full((2,), 2 ** 70), RuntimeError, "Overflow"),
    ("fill_2p70", lambda m: _f(m).fill_(2 ** 70), RuntimeError, "Overflow"),
    ("masked_fill_2p63", lambda m: _f(m).masked_fill(_f(m) > 1, BIG), RuntimeError, "Overflow"),
    ("clamp_2p63", lambda m: _f(m).clamp(BIG), RuntimeError, "Overflow"),
    ("ce_ignore_2p63", lambda m: _F(m).cross_entropy(_f(m), m.tensor([0, 1, 0]), ignore_index=BIG),
     RuntimeError, "ignore_index"),
    ("conv_stride_2p63", lambda m: _F(m).conv2d(_img(m), m.ones(1, 1, 2, 2), stride=BIG), RuntimeError,
     r"conv2d\(\).*stride"),
    ("max_pool_2p63", lambda m: _F(m).max_pool2d(_img(m), BIG), RuntimeError, "kernel_size"),
    ("adaptive_2p63", lambda m: _F(m).adaptive_avg_pool2d(_img(m), BIG), RuntimeError, "output_size"),
    # values that do not fit an integer tensor's dtype
    ("full_i32", lambda m: m.full((2,), 2 ** 31, dtype=m.int32), RuntimeError, "int32"),
    ("fill_i32", lambda m: m.zeros(2, dtype=m.int32).fill_(2 ** 31), RuntimeError, "int32"),
    ("fill_u8", lambda m: m.zeros(2, dtype=m.uint8).fill_(256), RuntimeError, "uint8"),
    ("fill_i64_nan", lambda m: m.zeros(2, dtype=m.int64).fill_(float("nan")), RuntimeError, "int64"),
    ("full_i64_1e20", lambda m: m.full((2,), 1e20, dtype=m.int64), RuntimeError, "int64"),
    ("masked_fill_i32", lambda m: m.zeros(2, dtype=m.int32).masked_fill(m.ones(2) > 0, 2 ** 31),
     RuntimeError, "int32"),
    # sizes (tuples of ints): TypeError, naming the function
    ("zeros_float", lambda m: m.zeros(2.0), TypeError, r"zeros\(\).*'size'.*float"),
    ("zeros_bool", lambda m: m.zeros(True), TypeError, r"zeros\(\).*bool"),
    ("zeros_2p63", lambda m: m.zeros(BIG), TypeError, r"zeros\(\).*'size'"),
    ("full_float_size", lambda m: m.full((2.0,), 1), TypeError, r"full\(\)"),
    ("reshape_float", lambda m: _t(m).reshape(6.0), TypeError, r"reshape\(\).*float"),
    ("reshape_bool", lambda m: _t(m).reshape(True, 6), TypeError, r"reshape\(\).*bool"),
    ("reshape_2p63", lambda m: _t(m).reshape(BIG), TypeError, r"reshape\(\)"),
    ("view_float", lambda m: _t(m).view(6.0), TypeError, r"view\(\)"),
    ("expand_float", lambda m: _t(m).expand(2.0, 3, 2), TypeError, r"expand\(\).*float"),
    ("expand_bool", lambda m: _t(m).expand(True, 3, 2), TypeError, r"expand\(\).*bool"),
    ("expand_2p63", lambda m: _t(m).expand(BIG, 3, 2), TypeError, r"expand\(\)"),
    ("permute_float", lambda m: _t(m).permute(1, 0.0), TypeError, r"permute\(\).*float"),
    ("permute_2p63", lambda m: _t(m).permute(1, BIG), TypeError, r"permute\(\)"),
    ("sum_tuple_float", lambda m: m.sum(_t(m), (0, 1.0)), TypeError, r"sum\(\).*'dim'"),
    ("sum_tuple_2p63", lambda m: m.sum(_t(m), (BIG,)), TypeError, r"sum\(\).*'dim'"),
    ("max_pool_float", lambda m: _F(m).max_pool2d(_img(m), 2.0), TypeError, r"max_pool2d\(\).*kernel_size"),
    ("max_pool_bool", lambda m: _F(m).max_pool2d(_img(m), True), TypeError, r"max_pool2d\(\).*kernel_size"),
    ("max_pool_stride_bool", lambda m: _F(m).max_pool2d(_img(m), 2, stride=True), TypeError, "stride"),
    ("max_pool_pair_float", lambda m: _F(m).max_pool2d(_img(m), (2, 2.0)), TypeError, "kernel_size"),
    ("adaptive_bool", lambda m: _F(m).adaptive_avg_pool2d(_img(m), True), TypeError, "output_size"),
    ("linear_float", lambda m: m.nn.Linear(2.0, 3), TypeError, r"Linear.*in_features"),
    ("linear_2p63", lambda m: m.nn.Linear(BIG, 3), TypeError, r"Linear.*in_features"),
    ("embedding_float", lambda m: m.nn.Embedding(2.0, 3), TypeError, r"Embedding.*num_embeddings"),
    ("embedding_2p63", lambda m: m.nn.Embedding(BIG, 3), TypeError, r"Embedding"),
    ("layer_norm_float", lambda m: m.nn.LayerNorm(2.0), TypeError, r"LayerNorm.*normalized_shape"),
    ("conv_kernel_float", lambda m: m.nn.Conv2d(1, 1, (2, 2.0)), TypeError, r"Conv2d.*kernel_size"),
    ("batch_norm_float", lambda m: m.nn.BatchNorm2d(2.0), TypeError, r"BatchNorm2d.*num_features"),
    # single ints (dims, k, indices): bools and floats are a TypeError
    ("transpose_float", lambda m: _t(m).transpose(0, 1.7), TypeError, r"transpose\(\).*'dim1'.*float"),
    ("transpose_bool", lambda m: _t(m).transpose(0, True), TypeError, r"transpose\(\).*bool"),
    ("transpose_bool_tensor", lambda m: _t(m).transpose(0, m.tensor(True)), TypeError, r"transpose\(\)"),
    ("unsqueeze_float", lambda m: _t(m).unsqueeze(1.0), TypeError, r"unsqueeze\(\).*'dim'.*float"),
    ("unsqueeze_bool", lambda m: _t(m).unsqueeze(True), TypeError, r"unsqueeze\(\).*bool"),
    ("squeeze_float", lambda m: _t(m).squeeze(1.0), TypeError, r"squeeze\(\).*float"),
    ("squeeze_bool", lambda m: _t(m).squeeze(True), TypeError, r"squeeze\(\).*bool"),
    ("sum_float", lambda m: m.sum(_t(m), 1.0), TypeError, r"sum\(\).*'dim'"),
    ("sum_bool", lambda m: m.sum(_t(m), True), TypeError, r"sum\(\).*'dim'"),
    ("mean_float", lambda m: m.mean(_f(m), 1.0), TypeError, r"mean\(\).*'dim'"),
    ("std_float", lambda m: _f(m).std(dim=1.0), TypeError, r"std\(\).*'dim'"),
    ("softmax_float", lambda m: m.softmax(_f(m), 1.0), TypeError, r"softmax\(\).*'dim'"),
    ("softmax_bool", lambda m: m.softmax(_f(m), True), TypeError, r"softmax\(\).*bool"),
    ("log_softmax_float", lambda m: m.log_softmax(_f(m), 1.0), TypeError, r"log_softmax\(\)"),
    ("cumsum_float", lambda m: m.cumsum(_t(m), 1.0), TypeError, r"cumsum\(\).*'dim'"),
    ("cumsum_bool", lambda m: m.cumsum(_t(m), True), TypeError, r"cumsum\(\)"),
    ("argmax_float", lambda m: m.argmax(_t(m), 1.0), TypeError, r"argmax\(\).*'dim'"),
    ("argmax_bool", lambda m: m.argmax(_t(m), True), TypeError, r"argmax\(\).*bool"),
    ("topk_float", lambda m: m.topk(_f(m), 1.0), TypeError, r"topk\(\).*'k'.*float"),
    ("topk_bool", lambda m: m.topk(_f(m), True), TypeError, r"topk\(\).*'k'.*bool"),
    ("cat_dim_float", lambda m: m.cat([_t(m), _t(m)], 1.0), TypeError, r"cat\(\).*'dim'"),
    ("cat_dim_bool", lambda m: m.cat([_t(m), _t(m)], True), TypeError, r"cat\(\).*'dim'"),
    ("stack_dim_float", lambda m: m.stack([_t(m), _t(m)], 1.0), TypeError, r"stack\(\).*'dim'"),
    ("gather_float", lambda m: m.gather(_t(m), 1.0, _t(m)), TypeError, r"gather\(\).*'dim'"),
    ("index_select_float", lambda m: m.index_select(_t(m), 1.0, m.tensor([0])), TypeError,
     r"index_select\(\).*'dim'"),
    ("index_select_bool", lambda m: m.index_select(_t(m), True, m.tensor([0])), TypeError,
     r"index_select\(\).*'dim'"),
    ("size_float", lambda m: _t(m).size(1.0), TypeError, r"size\(\).*'dim'"),
    ("size_bool", lambda m: _t(m).size(True), TypeError, r"size\(\).*bool"),
    ("stride_float", lambda m: _t(m).stride(1.0), TypeError, r"stride\(\)"),
    ("ce_ignore_float", lambda m: _F(m).cross_entropy(_f(m), m.tensor([0, 1, 0]), ignore_index=1.0),
     TypeError, "ignore_index"),
    ("conv_stride_float", lambda m: _F(m).conv2d(_img(m), m.ones(1, 1, 2, 2), stride=1.0), TypeError,
     "stride"),
    ("conv_stride_bool", lambda m: _F(m).conv2d(_img(m), m.ones(1, 1, 2, 2), stride=True), TypeError,
     "stride"),
    ("conv_groups_float", lambda m: _F(m).conv2d(_img(m), m.ones(1, 1, 2, 2), groups=1.0), TypeError,
     "groups"),
    ("conv_groups_bool", lambda m: _F(m).conv2d(_img(m), m.ones(1, 1, 2, 2), groups=True), TypeError,
     "groups"),
    # indices
    ("index_float", lambda m: _t(m)[1.0], IndexError, "float"),
    ("index_np_float", lambda m: _t(m)[np.float64(1)], IndexError, "float64"),
    ("index_float_tensor", lambda m: _t(m)[m.tensor(1.0)], IndexError, "tensors used as indices"),
    ("index_float_tensor_1d", lambda m: _t(m)[m.tensor([1.0])], IndexError, "tensors used as indices"),
    ("index_2p40", lambda m: _t(m)[2 ** 40], IndexError, "out of range"),
    ("slice_float", lambda m: _t(m)[:1.5], TypeError, "slice indices"),
    ("size_out_of_range", lambda m: _t(m).size(5), IndexError, r"size\(\).*out of range"),
    ("size_0d", lambda m: m.tensor(5).size(0), IndexError, r"size\(\)"),
    # expand: -1 only for an existing dim
    ("expand_leading_minus1", lambda m: _t(m).expand(-1, -1, -1), RuntimeError,
     r"expanded size of the tensor \(-1\) isn't allowed in a leading, non-existing dimension 0"),
    ("expand_leading_minus1_at_1", lambda m: m.ones(2).expand(3, -1, -1), RuntimeError,
     "non-existing dimension 1"),
    # something else where a tensor goes: TypeError naming function and argument
    ("zeros_like_int", lambda m: m.zeros_like(3), TypeError,
     r"^zeros_like\(\): argument 'input' \(position 1\) must be Tensor, not int$"),
    ("ones_like_str", lambda m: m.ones_like("x"), TypeError, r"ones_like\(\): argument 'input'.*str"),
    ("full_like_int", lambda m: m.full_like(3, 1), TypeError, r"full_like\(\): argument 'input'"),
    ("randn_like_list", lambda m: m.randn_like([1.0]), TypeError, r"randn_like\(\): argument 'input'"),
    ("sum_int", lambda m: m.sum(3), TypeError, r"sum\(\): argument 'input'"),
    ("mean_dtype_int", lambda m: m.mean(3, dtype=m.float32), TypeError, r"mean\(\): argument 'input'"),
    ("argmax_int", lambda m: m.argmax(3), TypeError, r"argmax\(\): argument 'input'"),
    ("argmin_int", lambda m: m.argmin(3), TypeError, r"argmin\(\): argument 'input'"),
    ("matmul_other", lambda m: m.matmul(_f(m), 3), TypeError, r"matmul\(\): argument 'other' \(position 2\)"),
    ("matmul_input", lambda m: m.matmul(3, _f(m)), TypeError, r"matmul\(\): argument 'input' \(position 1\)"),
    ("exp_int", lambda m: m.exp(3), TypeError,
     r"exp\(\): argument 'input' \(position 1\) must be Tensor, not int"),
    ("exp_str", lambda m: m.exp("x"), TypeError, r"exp\(\): argument 'input'"),
    ("add_str", lambda m: m.add(_t(m), "x"), TypeError, r"add\(\): argument 'other'.*str"),
    ("add_method_str", lambda m: _t(m).add("x"), TypeError, r"add\(\): argument 'other'"),
    ("mul_str", lambda m: m.mul(_t(m), "x"), TypeError, r"mul\(\): argument 'other'"),
    ("maximum_str", lambda m: m.maximum(_t(m), "x"), TypeError, r"maximum\(\): argument 'other'"),
    ("where_cond_int", lambda m: m.where(3, _t(m), _t(m)), TypeError, r"where\(\): argument 'condition'"),
    ("masked_fill_mask_int", lambda m: m.masked_fill(_t(m), 3, 1), TypeError,
     r"masked_fill\(\): argument 'mask'"),
    ("masked_fill_input_int", lambda m: m.masked_fill(3, _t(m) > 0, 1), TypeError,
     r"masked_fill\(\): argument 'input'"),
    ("clamp_int", lambda m: m.clamp(3, 0, 1), TypeError, r"clamp\(\): argument 'input'"),
    ("cat_int", lambda m: m.cat(3), TypeError, r"cat\(\): argument 'tensors'"),
    ("cat_element_int", lambda m: m.cat([_t(m), 3]), TypeError, r"cat\(\).*element 1"),
    ("stack_int", lambda m: m.stack(3), TypeError, r"stack\(\): argument 'tensors'"),
    ("stack_element_int", lambda m: m.stack([_t(m), 3]), TypeError, r"stack\(\).*element 1"),
    ("gather_index_list", lambda m: m.gather(_t(m), 1, [[0]]), TypeError, r"gather\(\): argument 'index'"),
    ("index_select_index_list", lambda m: m.index_select(_t(m), 0, [0]), TypeError,
     r"index_select\(\): argument 'index'"),
    ("index_select_input_int", lambda m: m.index_select(3, 0, m.tensor([0])), TypeError,
     r"index_select\(\): argument 'input'"),
    ("relu_int", lambda m: _F(m).relu(3), TypeError, r"relu\(\): argument 'input'"),
    ("dropout_int", lambda m: _F(m).dropout(3), TypeError, r"dropout\(\): argument 'input'"),
    ("layer_norm_int", lambda m: _F(m).layer_norm(3, (2,)), TypeError, r"layer_norm\(\): argument 'input'"),
    ("linear_input_int", lambda m: _F(m).linear(3, _f(m)), TypeError, r"linear\(\): argument 'input'"),
    ("linear_weight_int", lambda m: _F(m).linear(_f(m), 3), TypeError, r"linear\(\): argument 'weight'"),
    ("embedding_weight_int", lambda m: _F(m).embedding(_t(m), 3), TypeError,
     r"embedding\(\): argument 'weight'"),
    ("cross_entropy_int", lambda m: _F(m).cross_entropy(3, m.tensor([0])), TypeError,
     r"cross_entropy\(\): argument 'input'"),
    ("sgd_single_tensor", lambda m: m.optim.SGD(m.ones(2, requires_grad=True), lr=0.1), TypeError,
     r"SGD.*iterable of Tensors"),
    ("leaky_relu_str", lambda m: _F(m).leaky_relu(_f(m), "x"), TypeError, r"leaky_relu\(\)"),
    # ranges refused where torch refuses them too
    ("conv_groups_0", lambda m: m.nn.Conv2d(1, 1, 2, groups=0), ValueError, "groups"),
]


@pytest.mark.parametrize("name,fn,cls,pattern", CASES, ids=[c[0] for c in CASES])
def test_refused_like_torch(name, fn, cls, pattern):
    e = _err(fn, ag)
    assert e is not None, "%s: anygrad did not raise" % name
    assert isinstance(e, cls), "%s: %s: %s" % (name, type(e).__name__, e)
    assert re.search(pattern, str(e)), "%s: message %r" % (name, str(e))
    if torch is not None:
        te = _err(fn, torch)
        assert te is not None, "%s: torch did not raise" % name
        assert isinstance(e, type(te)), "%s: torch raises %s (%s), anygrad %s (%s)" % (
            name, type(te).__name__, te, type(e).__name__, e)


# Where torch does not refuse but anygrad does (never a wrapped value).
OWN = [
    ("tensor_u8_negative", lambda: ag.tensor([-1], dtype=ag.uint8), RuntimeError, "uint8"),  # torch: 255
    ("fill_u8_negative", lambda: ag.zeros(2, dtype=ag.uint8).fill_(-1), RuntimeError, "uint8"),
    ("tensor_i64_nan", lambda: ag.tensor([float("nan")], dtype=ag.int64), RuntimeError, "int64"),
    ("manual_seed_float", lambda: ag.manual_seed(1.5), TypeError, r"manual_seed\(\).*float"),
    ("manual_seed_bool", lambda: ag.manual_seed(True), TypeError, r"manual_seed\(\).*bool"),
    ("generator_2p64", lambda: ag.Generator(2 ** 64), RuntimeError, r"Generator\(\).*seed"),
    ("generator_float", lambda: ag.Generator(1.5), TypeError, r"Generator\(\).*seed"),
    ("permute_bool", lambda: ag.ones(2, 3).permute(1, True), TypeError, r"permute\(\).*bool"),  # torch: 1
    ("sum_tuple_bool", lambda: ag.ones(2, 3).sum((0, True)), TypeError, r"sum\(\).*bool"),  # torch: 1
    ("linear_bool", lambda: ag.nn.Linear(True, 3), TypeError, r"Linear.*bool"),  # torch: 1
    ("conv_stride_module_bool", lambda: ag.nn.Conv2d(1, 1, 2, stride=True), TypeError, "stride"),
    ("dim_beyond_int32", lambda: ag.ones(2, 3).transpose(0, 2 ** 32 + 1), ValueError, "out of range"),
    ("sum_dim_beyond_int32", lambda: ag.ones(2, 3).sum(2 ** 32), ValueError, "out of range"),
    ("sum_tuple_beyond_int32", lambda: ag.ones(2, 3).sum((2 ** 32,)), ValueError, "out of range"),
    ("ignore_index_beyond_int32", lambda: ag.functional.cross_entropy(
        ag.ones(3, 2), ag.tensor([0, 1, 0]), ignore_index=2 ** 32 + 1), ValueError, "ignore_index"),
    ("conv_stride_beyond_int32", lambda: ag.functional.conv2d(
        ag.ones(1, 1, 4, 4), ag.ones(1, 1, 2, 2), stride=2 ** 32 + 1), ValueError, "stride"),
    ("layer_norm_two_dims", lambda: ag.nn.LayerNorm((2, 3)), ValueError, "normalized_shape"),
    ("f_layer_norm_wrong_shape", lambda: ag.functional.layer_norm(ag.ones(2, 3), (4,)), ValueError,
     "normalized_shape"),
    ("memory_cap_negative", lambda: ag.set_memory_cap("cpu", -1), ValueError, "nbytes"),
    ("memory_cap_float", lambda: ag.set_memory_cap("cpu", 1.5), TypeError, "nbytes"),
    ("profiler_window_float", lambda: ag.Profiler(window=2.5), TypeError, "window"),
    ("profiler_window_beyond_int32", lambda: ag.Profiler(window=2 ** 32 + 20), ValueError, "window"),
    ("gpt_n_head_beyond_int32", lambda: ag.nn.GPT(16, 8, 1, 2 ** 32 + 2, 8), ValueError, "n_head"),
    ("llama_float", lambda: ag.nn.Llama(16, 8.5, 1, 2, 8), TypeError, "dim"),
    ("adamw_betas_float", lambda: ag.optim.AdamW([ag.ones(1, requires_grad=True)], betas=0.9), TypeError,
     "betas"),
    ("load_state_dict_list", lambda: ag.nn.Linear(2, 2).load_state_dict({"weight": [[1.0, 2.0]] * 2,
                                                                         "bias": [1.0, 2.0]}),
     TypeError, "weight"),
    ("randn_generator_int", lambda: ag.randn(2, generator=3), TypeError, r"randn\(\): argument 'generator'"),
    ("dropout_generator_str", lambda: ag.functional.dropout(ag.ones(2), 0.5, generator="g"), TypeError,
     r"dropout\(\): argument 'generator'"),
]


@pytest.mark.parametrize("name,fn,cls,pattern", OWN, ids=[c[0] for c in OWN])
def test_refused(name, fn, cls, pattern):
    with pytest.raises(cls) as e:
        fn()
    assert re.search(pattern, str(e.value)), str(e.value)


def test_no_error_left_behind():
    for _name, fn, _cls, _p in CASES[:12]:
        _err(fn, ag)
    assert ag.ones(2).sum().item() == 2.0
    assert ag._lib.lib.ag_last_status() == 0


# ---- values anygrad keeps exactly (a double would round them) ------------------

def test_int64_values_beyond_2p53_are_exact():
    v = 2 ** 53 + 1
    assert ag.full((2,), v, dtype=ag.int64).tolist() == [v, v]
    assert ag.zeros(2, dtype=ag.int64).fill_(-v).tolist() == [-v, -v]
    t = ag.zeros(3, dtype=ag.int64)
    t[1] = v
    assert t.tolist() == [0, v, 0]
    m = ag.tensor([True, False, True])
    assert ag.zeros(3, dtype=ag.int64).masked_fill(m, v).tolist() == [v, 0, v]
    assert ag.full_like(ag.zeros(1, dtype=ag.int64), 2 ** 63 - 1).tolist() == [2 ** 63 - 1]
    assert ag.tensor([2 ** 63 - 1, -2 ** 63]).tolist() == [2 ** 63 - 1, -2 ** 63]
    assert ag.tensor([2 ** 31 - 1, -2 ** 31], dtype=ag.int32).tolist() == [2 ** 31 - 1, -2 ** 31]
    assert ag.tensor([255, 0], dtype=ag.uint8).tolist() == [255, 0]


def test_big_ints_into_float_and_bool_tensors_are_fine():
    # as torch: the int is a float value (or a truth value), nothing to overflow
    assert ag.tensor([1.0, BIG]).tolist() == [1.0, float(BIG)]
    assert ag.tensor([2 ** 64], dtype=ag.float32).tolist() == [float(2 ** 64)]
    assert ag.tensor([BIG, 0], dtype=ag.bool).tolist() == [True, False]
    assert ag.tensor([3.7], dtype=ag.int64).tolist() == [3]  # truncation, as torch


def test_int_like_arguments_that_are_accepted():
    t = ag.arange(6).reshape(3, 2)
    assert t.transpose(np.int64(0), ag.tensor(1)).shape == (2, 3)
    assert t.unsqueeze(np.int32(0)).shape == (1, 3, 2)
    assert t.size(-1) == 2 and t.size(np.int64(0)) == 3 and t.stride(0) == 2
    assert ag.zeros(np.int64(2), 3).shape == (2, 3)
    assert t.sum(dim=(0, np.int64(1))).item() == 15
    ag.manual_seed(-1)  # negative seeds are taken, as torch's
    ag.manual_seed(2 ** 64 - 1)
    assert t.expand(1, -1, -1).shape == (1, 3, 2)
    assert ag.ones(3, 1).expand(-1, 4).shape == (3, 4)


# ---- bool indices: torch's meaning ------------------------------------------------

BOOL_INDEX = ["t[True]", "t[False]", "t[True, 0]", "t[0, True]", "t[None, True]", "t[..., True]",
              "t[True, ..., False]", "t[True, 1:]", "t[True, :, True]", "t[True, None, True]",
              "t[None, True, True, 0]", "t[True, True, False]", "t[:, True, 0, True]", "t[True, 1:, True]",
              "t[0, True, True]", "t[..., True, True]", "t[1:2, True]", "s[True]", "s[False]",
              "t[T]", "t[F]", "t[T, 1]"]


@pytest.mark.parametrize("expr", BOOL_INDEX)
def test_bool_index_as_torch(expr):
    def ev(m):
        return eval(expr, {"np": np}, {"t": m.arange(6).reshape(3, 2), "s": m.tensor(5),
                                      "T": m.tensor(True), "F": m.tensor(False)})
    got = ev(ag)
    if torch is not None:
        want = ev(torch)
        assert tuple(got.shape) == tuple(want.shape), expr
        assert got.tolist() == want.tolist(), expr
    want = eval(expr, {"np": np}, {"t": np.arange(6).reshape(3, 2), "s": np.array(5), "T": np.True_,
                                   "F": np.False_})
    assert tuple(got.shape) == want.shape and got.tolist() == want.tolist(), expr


def test_numpy_bool_index_is_a_bool():
    # NumPy's meaning (torch 1.13 still reads np.bool_ as the int 1, with
    # NumPy's deprecation warning): the same as a Python bool
    t = ag.arange(6).reshape(3, 2)
    assert t[np.True_].shape == (1, 3, 2) and t[np.False_].shape == (0, 3, 2)
    assert t[np.True_].tolist() == np.arange(6).reshape(3, 2)[np.True_].tolist()


# ---- huge slice bounds clamp as Python's (and torch's, and NumPy's) ------------------

SLICES = [(None, 2 ** 64 + 2, None), (2 ** 64, None, None), (-2 ** 64, None, None), (None, None, 2 ** 64),
          (-BIG - 5, BIG + 5, None), (1, 0, None), (None, -2 ** 70, None), (None, True, None),
          (None, None, True), (-2, None, BIG), (None, 2 ** 40, 2), (np.int64(1), None, None)]


@pytest.mark.parametrize("sl", SLICES, ids=[repr(s) for s in SLICES])
def test_huge_slice_bounds_clamp(sl):
    s = slice(*sl)
    got = ag.arange(6).reshape(3, 2)[s]
    want = np.arange(6).reshape(3, 2)[s]
    assert tuple(got.shape) == want.shape and got.tolist() == want.tolist()
    got1 = ag.arange(5)[1:][s]  # a view with an offset
    want1 = np.arange(5)[1:][s]
    assert got1.tolist() == want1.tolist()


def test_torch_clamps_the_item_case():
    if torch is None:
        pytest.skip("torch is not installed")
    t = torch.arange(6).reshape(3, 2)
    assert ag.arange(6).reshape(3, 2)[:2 ** 64 + 2].tolist() == t[:2 ** 64 + 2].tolist()
    assert ag.arange(6).reshape(3, 2)[2 ** 64:].shape == tuple(t[2 ** 64:].shape)


def test_slice_step_refusals():
    t = ag.arange(6)
    with pytest.raises(ValueError):
        t[::0]
    with pytest.raises(ValueError):
        t[::-1]  # torch refuses negative steps too
    with pytest.raises(TypeError):
        t[::1.0]


# ---- every public function that takes a tensor names itself ---------------------

def _tensor_functions():
    out = []
    for name in ag.ELEMENTWISE_OPS:
        out.append((name, getattr(ag, name)))
    for name in ("sum", "mean", "amax", "amin", "argmax", "argmin", "max", "min", "var", "std", "cumsum",
                 "softmax", "log_softmax", "gather", "topk", "masked_fill", "clamp", "index_select", "matmul",
                 "zeros_like", "ones_like", "full_like", "randn_like", "pow", "add", "sub", "mul", "div",
                 "where"):
        out.append((name, getattr(ag, name)))
    F = ag.functional
    for name in ("cross_entropy", "mse_loss", "layer_norm", "rms_norm", "dropout", "conv2d", "max_pool2d",
                 "avg_pool2d", "adaptive_avg_pool2d", "batch_norm", "linear", "embedding",
                 "scaled_dot_product_attention"):
        out.append(("functional." + name, getattr(F, name)))
    return out


@pytest.mark.parametrize("name,fn", _tensor_functions(), ids=[n for n, _ in _tensor_functions()])
def test_non_tensor_is_a_type_error_naming_the_function(name, fn):
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
    good = {"dim": 0, "k": 1, "index": ag.tensor([[0]]), "v": 1.0, "fill_value": 1.0, "value": 1.0,
            "kernel_size": 2, "output_size": 1, "running_mean": None, "running_var": None,
            "s0": 0.5, "s1": 0.5}
    args = []
    for p in params:
        args.append(good.get(p.name, "x"))
    short = name.split(".")[-1]
    with pytest.raises(TypeError) as e:
        fn(*args)
    assert re.search(r"\b%s\(\): argument '\w+'" % short, str(e.value)), str(e.value)


def test_more_non_tensors_name_the_function():
    with pytest.raises(TypeError, match=r"backward\(\): argument 'gradient'"):
        ag.ones(2, requires_grad=True).sum().backward(3)
    with pytest.raises(TypeError, match=r"from_numpy\(\)"):
        ag.from_numpy([1, 2])
    with pytest.raises(TypeError, match=r"copy_\(\): argument 'src'"):
        ag.ones(2).copy_("ab")
    with pytest.raises(TypeError, match=r"GPT.forward\(\): argument 'idx'"):
        ag.nn.GPT(16, 8, 1, 2, 8)([[1, 2]])
    with pytest.raises(TypeError, match=r"load_state_dict\(\): argument 'state_dict'"):
        ag.nn.Linear(2, 2).load_state_dict([1])
    p = ag.ones(2, requires_grad=True)
    p.sum().backward()
    n = ag.optim.clip_grad_norm_(p, 1.0)  # one tensor, as torch (not its rows)
    assert abs(n.item() - 2 ** 0.5) < 1e-6


def test_item_path():
    # tests/harden3_python.sh runs this file with anygrad._fast built
    if os.environ.get("ANYGRAD_EXPECT_FAST") == "1":
        assert ag._tensor._fast_item is not None, "anygrad._fast was not built"
    t = ag.arange(6).reshape(3, 2)
    assert t[ag.tensor(2)].tolist() == [4, 5]
    assert t.transpose(ag.tensor(0), ag.tensor(-1)).shape == (2, 3)
    with pytest.raises(TypeError):
        t.transpose(0, ag.tensor(1.0))
    with pytest.raises(IndexError):
        t[ag.tensor(3)]
