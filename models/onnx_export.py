"""Export a sentence-transformers model to ONNX (fp32) and quantize it (dynamic int8).

This is the one place the ONNX backends need torch: the transformer is traced once from the
packaged (or local) weights into `model.onnx`, then `onnxruntime.quantization.quantize_dynamic`
writes `model-int8.onnx` (int8 weights per output channel, activations quantized per call).
`ragindex.models.onnx_embedder` runs it in a child process (`python -m
ragindex.models.onnx_export MODEL_DIR OUT_DIR`), so a process that serves queries never
imports torch. Files are written beside their final name and renamed into place, so a reader
sees a whole model or none.
"""

from __future__ import annotations

import argparse
import inspect
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

FP32_FILE = "model.onnx"
INT8_FILE = "model-int8.onnx"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
OPSET = 17


def _replace_atomically(out_dir: Path, name: str, write: Callable[[str], None]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out_dir)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the cache from other users' replicas
        os.replace(tmp, out_dir / name)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def export_fp32(model_dir: Path, out_dir: Path) -> Path:
    """Trace the transformer (token embeddings out; pooling stays in numpy) to ONNX."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    ids = torch.ones((2, 8), dtype=torch.long)
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    example = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    # By name, and only the inputs the model takes: MPNet has no token_type_ids, and its
    # third positional input is position_ids.
    accepted = inspect.signature(model.forward).parameters
    inputs = {name: value for name, value in example.items() if name in accepted}
    axes = {name: {0: "batch", 1: "tokens"} for name in (*inputs, OUTPUT_NAME)}

    def write(path: str) -> None:
        with torch.no_grad():
            # The TorchScript exporter: the dynamo one needs onnxscript and gives no speed-up.
            torch.onnx.export(
                model,
                (),
                path,
                kwargs=inputs,
                input_names=list(inputs),
                output_names=[OUTPUT_NAME],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )

    _replace_atomically(out_dir, FP32_FILE, write)
    return out_dir / FP32_FILE


def quantize_int8(fp32: Path, out_dir: Path) -> Path:
    """Dynamic int8: weights per output channel (per tensor loses far more: cosine 0.91 vs
    0.98 to fp32 on short texts), activations quantized per call, no calibration data."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def write(path: str) -> None:
        quantize_dynamic(str(fp32), path, weight_type=QuantType.QInt8, per_channel=True)

    _replace_atomically(out_dir, INT8_FILE, write)
    return out_dir / INT8_FILE


def export(model_dir: Path, out_dir: Path, int8: bool) -> Path:
    """The fp32 model (exported if missing) and, with `int8`, its quantized copy."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / FP32_FILE
    if not fp32.is_file():
        export_fp32(model_dir, out_dir)
    if not int8:
        return fp32
    quantized = out_dir / INT8_FILE
    return quantized if quantized.is_file() else quantize_int8(fp32, out_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--int8", action="store_true", help="also write the int8 model")
    args = parser.parse_args(argv)
    print(export(args.model_dir, args.out_dir, args.int8))


if __name__ == "__main__":
    main()
