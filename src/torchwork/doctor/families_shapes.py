"""Error families of shapes, losses and their targets, and dtypes: their messages, causes and fixes.

Part of the table :data:`torchwork.doctor.explain.FAMILIES` reads in order (after the runtime's).
"""

from __future__ import annotations

import re

from torchwork.doctor.family import Family

_LOSS_FRAMES = r"nll_loss|cross_entropy|CrossEntropyLoss|NLLLoss|'target'"
_NUMPY_REDUCTION = r"_wrapreduction|fromnumeric\.py|numpy[/\\]_?core[/\\]_methods\.py|\bnp\.(?:sum|mean|average|std|var)\("


def _matmul_detail(m: re.Match[str]) -> str | None:
    if m.re.groups < 4:
        return None
    rows, got, expected = (int(m.group(i)) for i in (1, 2, 3))
    if got == expected:
        return None
    return (f"The layer expects {expected} input features but received {got} (batch of {rows}). Set "
            f"in_features={got} in that layer, or fix the reshape/flatten before it.")


def _channels_detail(m: re.Match[str]) -> str | None:
    shape = [int(v) for v in re.findall(r"\d+", m.group("shape") or "")]
    want = int(m.group("want"))
    if len(shape) >= 3 and want in shape[2:]:
        where = shape.index(want, 2)
        order = ", ".join(str(d) for d in [0, where] + [d for d in range(1, len(shape)) if d != where])
        return (f"The input {shape} has {want} (the channels the layer wants) at dimension {where}, not 1: the "
                f"channels are not where the convolution reads them. Move them to dimension 1 before the layer: "
                f"x.permute({order}) (for NHWC images x.permute(0, 3, 1, 2)).")
    return (f"The convolution was built for {m.group('want')} input channels and received "
            f"{m.group('got')}. Set in_channels={m.group('got')}, or convert the images (e.g. grayscale "
            "vs RGB, or channels-last data that needs .permute(0, 3, 1, 2)).")


def _shapes_detail(m: re.Match[str]) -> str | None:
    return f"Tensor a has {m.group(1)} at dimension {m.group(3)}, tensor b has {m.group(2)}."


def _target_oob_detail(m: re.Match[str]) -> str | None:
    value = m.groupdict().get("t")
    if value is None:
        return None
    if value.startswith("-"):
        return (f"A target is {value}: negative labels are only allowed as ignore_index (default -100). "
                "Check the label encoding.")
    return (f"A target is {value}, so the model needs at least {int(value) + 1} output classes (labels "
            "run 0..C-1). Either the last layer is too small or the labels start at 1.")


def _dtype_detail(m: re.Match[str]) -> str | None:
    groups = [g for g in m.groups() if g]
    if len(groups) == 2 and groups[0].lower() == "long":
        return (f"The operation wanted int64 (Long) and got {groups[1]}: an index or label tensor of another integer "
                "type. Convert it with .long(), not .float().")
    return None


SHAPE_FAMILIES: tuple[Family, ...] = (
    # --------------------------------------------------------------- shapes
    Family(
        "matmul-shape", "a Linear/matmul received the wrong number of features",
        (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",
         r"size mismatch, m1: \[(\d+) x (\d+)\], m2: \[(\d+) x (\d+)\]",
         r"mat1 dim 1 must match mat2 dim 0",
         r"Expected size for first two dimensions of batch2 tensor to be"),
        "The input's last dimension is not the layer's in_features: the flatten size after the "
        "convolutions was computed wrong, the input was not flattened, or the data has another width.",
        "Print x.shape just before the layer; set in_features to the real size (or use nn.LazyLinear), "
        "and flatten with x.flatten(1) so the batch dimension is kept.",
        detail=_matmul_detail),
    Family(
        "rnn-input-size", "an RNN/LSTM/GRU received the wrong feature size",
        (r"input\.size\(-1\) must be equal to input_size\. Expected (\d+), got (\d+)",),
        "The last dimension of the sequence is not the input_size the RNN was built with (or the batch and "
        "time dimensions are swapped: batch_first defaults to False).",
        "Set input_size to the feature size, and batch_first=True if your tensors are (batch, time, "
        "features).", check=None),
    Family(
        "conv-channels", "a convolution received the wrong number of channels",
        (r"(?:Given groups=\d+, weight of size \[[\d, ]+\], )?expected input\[(?P<shape>[\d, ]+)\] to have "
         r"(?P<want>\d+) channels, but got (?P<got>\d+) channels instead",),
        "The input's channel dimension does not match the layer's in_channels: grayscale vs RGB images, "
        "images in channels-last (N, H, W, C) layout, or a wrong in_channels after a previous layer.",
        "Match in_channels to the data, convert images consistently (.convert('RGB')), and permute "
        "NHWC data to NCHW with x.permute(0, 3, 1, 2).", detail=_channels_detail),
    Family(
        "conv-input-rank", "a convolution received a tensor of the wrong rank",
        (r"Expected \dD \(unbatched\) or \dD \(batched\) input to conv\dd, but got input of size",
         r"Expected \d-dimensional input for \d-dimensional weight"),
        "Conv2d wants (N, C, H, W) (or (C, H, W) unbatched): a single image lost its channel or batch "
        "dimension, or the data is flattened.",
        "Add the missing dimensions (x.unsqueeze(0) for the batch, x.unsqueeze(1) for one channel), or "
        "stop flattening before the convolutions.", check=None),
    Family(
        "conv-too-small", "the input is smaller than the convolution/pooling kernel",
        (r"Kernel size can't be greater than actual input size", r"Output size is too small"),
        "After the previous layers the spatial size is smaller than the kernel: images too small for the "
        "architecture, or too many stride/pooling stages.",
        "Resize inputs to the size the model was designed for, or remove a pooling stage / use padding; "
        "print x.shape between layers to see where it shrinks.", check=None),
    Family(
        "broadcast-mismatch", "element-wise op on tensors whose shapes do not broadcast",
        (r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
         r"dimension (\d+)",),
        "Two tensors combined element-wise have different sizes in a dimension where neither is 1.",
        "Print both shapes; reshape/unsqueeze so they line up, or fix the layer that produced the wrong "
        "size (often a target of shape (N, 1) vs predictions (N,) or a wrong number of outputs).",
        detail=_shapes_detail),
    Family(
        "expand-mismatch", "expand() to an incompatible size",
        (r"The expanded size of the tensor \(\d+\) must match the existing size \(\d+\) at non-singleton "
         r"dimension \d+",),
        "expand/expand_as/broadcast_to can only stretch dimensions of size 1.",
        "Make the source dimension 1 first (unsqueeze) or use repeat for real copies; check the shapes.",
        check=None),
    Family(
        "cat-size-mismatch", "torch.cat/stack of tensors with different sizes",
        (r"Sizes of tensors must match except in dimension \d+",),
        "All tensors given to torch.cat must have the same size in every dimension except the one "
        "being concatenated.",
        "Print the shapes; pad/crop to a common size, or concatenate along another dimension.", check=None),
    Family(
        "view-noncontiguous", ".view() on a non-contiguous tensor",
        (r"view size is not compatible with input tensor's size and stride",),
        "view() needs memory laid out compatibly; after transpose/permute/slicing it is not.",
        "Use .reshape(...) (copies only when needed), or .contiguous().view(...).", check=None),
    Family(
        "reshape-invalid", "reshape/view to a size with a different number of elements",
        (r"shape '\[[-\d, ]*\]' is invalid for input of size \d+",),
        "The requested shape does not hold the same number of elements, typically a hard-coded feature "
        "size (e.g. 784) that does not match the data, or a last batch of another size with a hard-coded "
        "batch dimension.",
        "Keep the batch dimension free: x.reshape(x.size(0), -1) or x.flatten(1); compute feature sizes "
        "from the data.", check=None),
    # --------------------------------------------------------------- losses and targets
    Family(
        "class-target-dtype", "class-index targets are floats",
        (r"expected target dtype to be Long or Byte, but got \w+",
         r"expected scalar type Long but found (?:Float|Double|Half)",
         r"Expected object of scalar type Long but got scalar type \w+ for argument #\d+ '?target'?",
         (r"expected scalar type Long but found (?:Int|Short|Byte|Char)", _LOSS_FRAMES),
         r"\"nll_loss\w*\" not implemented for '(?:Float|Double|Int|Short|Half)'"),
        "CrossEntropyLoss/NLLLoss with targets of shape (N,) want int64 (Long) class indices, but the labels "
        "have another dtype: float (converted from a float NumPy array) or int32 (Int, e.g. np.int32 labels, "
        "torch.IntTensor, or labels built on Windows where NumPy's default integer is 32-bit).",
        "Convert the labels once: y = y.long() (or torch.as_tensor(labels, dtype=torch.long)). Float "
        "targets are only for class probabilities of shape (N, C).", check=None),
    Family(
        "float-target-dtype", "integer targets given to a loss that needs floats",
        (r"result type Float can't be cast to the desired output type (?:Long|Int|Byte)",
         r"Found dtype (?:Long|Int|Double) but expected Float",
         r"expected scalar type Float but found Long"),
        "BCEWithLogitsLoss/BCELoss/MSELoss compute with floating-point targets, but the labels are integers.",
        "Convert the targets: y = y.float() (and give them the prediction's shape: y.view_as(logits)).",
        check=None,
        variants=((r"Found dtype Double",
                   "The target (or a label, a weight) is float64, NumPy's default float, while the model and its "
                   "output are float32: the loss's backward pass refuses to mix them.",
                   "Make the targets float32 once, where they are built: y = y.float(), "
                   "torch.as_tensor(y, dtype=torch.float32), or array.astype(np.float32) in the Dataset "
                   "(torch.from_numpy keeps float64)."),)),
    Family(
        "onehot-target", "one-hot or integer matrix targets for cross-entropy",
        (r"Expected floating point type for target with class probabilities, got \w+",
         r"0D or 1D target tensor expected, multi-target not supported"),
        "CrossEntropyLoss received (N, C) integer targets: one-hot labels, or a label tensor with an "
        "extra dimension.",
        "Pass class indices of shape (N,): y.argmax(dim=1) for one-hot labels or y.squeeze(1) for (N, 1); "
        "or pass y.float() if they really are probabilities.", check=None),
    Family(
        "target-out-of-bounds", "a class label outside [0, num_classes)",
        (r"Target (?P<t>-?\d+) is out of bounds", r"Assertion `cur_target >= 0 && cur_target < n_classes`"),
        "A label is >= the number of model outputs or negative: the last layer has too few outputs, labels "
        "start at 1, or a placeholder like -1 marks unlabelled samples.",
        "Make the output layer size = number of classes; map labels to 0..C-1; use ignore_index for the "
        "placeholder.", detail=_target_oob_detail),
    Family(
        "index-out-of-range", "an index (e.g. a token id) outside the embedding/tensor",
        (r"index out of range in self", r"index -?\d+ is out of bounds for dimension \d+ with size \d+"),
        "An Embedding received an id >= num_embeddings (vocabulary grew, padding/unknown ids not counted) "
        "or an indexing op went past the end.",
        "Set num_embeddings = max id + 1 (len(vocab) including special tokens); check ids.max().",
        check=None),
    Family(
        "loss-broadcast", "loss input and target shapes differ and broadcast silently",
        (r"Using a target size \(torch\.Size\(\[[\d, ]*\]\)\) that is different to the input size",),
        "MSELoss/L1Loss got predictions of shape (N, 1) and targets of shape (N,) (or similar); broadcasting "
        "turns them into an (N, N) matrix and the loss is wrong without any error.",
        "Make the shapes equal: loss_fn(pred.squeeze(-1), y) or loss_fn(pred, y.view_as(pred)).",
        check=None),
    Family(
        "loss-target-shape", "predictions and targets have incompatible shapes",
        (r"Expected input batch_size \((\d+)\) to match target batch_size \((\d+)\)",
         r"Expected target size \[[\d, ]*\], got \[[\d, ]*\]"),
        "The model output and the targets do not line up: a flatten that folded the batch into the "
        "features (x.view(-1, k) with a wrong k), targets from another batch, or (N, C, d) outputs whose "
        "class dimension is not dimension 1.",
        "Flatten with x.flatten(1) / x.view(x.size(0), -1), take inputs and targets from the same batch, "
        "and for sequence/pixel outputs move the class dimension to dim 1 (logits.permute(0, 2, 1)).",
        check=None),
    Family(
        "bce-input-range", "BCELoss received values outside [0, 1]",
        (r"all elements of input should be between 0 and 1",),
        "BCELoss needs probabilities, but it received raw logits.",
        "Use nn.BCEWithLogitsLoss on the logits (numerically stable), or apply torch.sigmoid first.",
        check=None),
    # --------------------------------------------------------------- dtypes
    Family(
        "dtype-mismatch", "tensors of different dtypes in one operation",
        (r"mat1 and mat2 must have the same dtype", r"expected m1 and m2 to have the same dtype",
         r"Input type \((?!torch\.cuda)[\w:.]+\) and (?:weight|bias) type \((?!torch\.cuda)[\w:.]+\) should be the same",
         r"expected scalar type (\w+) but found (\w+)", r"expected mat1 and mat2 to have the same dtype"),
        "The input's dtype differs from the weights': NumPy arrays are float64 by default and the model "
        "float32, or half-precision inputs reach a float32 model outside autocast.",
        "Convert data once, in the Dataset: torch.as_tensor(x, dtype=torch.float32) (or .float()); for "
        "mixed precision use torch.autocast instead of calling .half() on inputs.", check=None,
        detail=_dtype_detail),
    Family(
        "dtype-not-implemented", "an operation is not implemented for this dtype on this device",
        (r"\"\w+\" not implemented for '(?:Half|BFloat16|Long|Int|Bool|Byte|Char)'",
         r"could not infer output dtype\. Input dtype must be either a floating point or complex dtype"),
        "The op has no kernel for that dtype here: integer tensors given to mean/softmax, or half "
        "precision on a device that lacks the kernel.",
        "Convert first (x.float()); for mixed precision on CPU prefer bfloat16 with torch.autocast.",
        check=None),
    Family(
        "scalar-conversion", "converting a multi-element tensor to a Python number",
        (r"a Tensor with \d+ elements cannot be converted to Scalar",
         r"only one element tensors can be converted to Python scalars"),
        ".item(), float() or int() need exactly one element; the tensor still has a batch dimension.",
        "Reduce first (t.mean().item()), or use t.tolist() for all values.", check=None),
    Family(
        "zero-dim-index", "indexing a 0-dim tensor, as code written for PyTorch before 0.4 reads a loss",
        (r"invalid index of a 0-dim tensor",),
        "Since PyTorch 0.4 a reduced loss (and any sum, mean or .max() of a whole tensor) is a 0-dimensional "
        "tensor with no index; `loss.data[0]` and `loss[0]` are the old way to read its value.",
        "Read the number with loss.item() (loss.data[0] -> loss.item()); keep loss.detach() where a tensor "
        "without history is wanted.", check=None),
    Family(
        "bool-ambiguous", "if/and/or on a tensor with several values",
        (r"Boolean value of Tensor with more than one value is ambiguous",),
        "Python needs one True/False but the tensor has several elements.",
        "Use (t > 0).any() / .all(), or compare a reduced value; for element-wise logic use torch.where "
        "or & and |.", check=None),
    Family(
        "numpy-device", ".numpy() on a GPU tensor",
        (r"can't convert \S+ device type tensor to numpy",),
        "NumPy arrays live in host memory; the tensor is on another device.",
        "t.detach().cpu().numpy().", check=None,
        variants=((_NUMPY_REDUCTION,
                   "A NumPy reduction (np.mean, np.sum...) was given a list of GPU tensors, typically the losses "
                   "of an epoch collected with losses.append(loss): NumPy converts each element to an array and "
                   "cannot read GPU memory.",
                   "Reduce in torch instead: torch.stack(losses).mean().item(), or collect plain numbers in the "
                   "first place: losses.append(loss.item()); then np.mean(losses) works."),)),
)
