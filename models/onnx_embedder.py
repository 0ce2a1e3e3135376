"""The ONNX Runtime embedder: the same sentence-transformers weights without torch at run time.

Tokenizing (HF `tokenizers`, from the model's tokenizer.json), the transformer (ONNX Runtime,
CPU), mean pooling over the attention mask and L2 normalisation (numpy) reproduce a
sentence-transformers model with mean pooling; fp32 vectors equal sentence-transformers' to
about 2e-7 per component (MiniLM; 8e-6 for the 12-layer mpnet), so backend `onnx` keeps the
model identity of the torch backends.
Backend `onnx-int8` runs the dynamically quantized export: its identity says so
(`quantization`), and vectors of the two never mix in one index.

The ONNX files are exported from the model's own weights on first use, in a child process
(`ragindex.models.onnx_export`: the only step that needs torch) and cached under
`$RAGINDEX_ONNX_CACHE`, or `${RAGINDEX_CACHE:-~/.cache/ragindex}/onnx`, keyed by the weights
hash and the export recipe. A file lock makes concurrent first uses export once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ragindex.config import EmbedderSpec
from ragindex.errors import BackendUnavailable, InvalidInput
from ragindex.models.embedder import (
    BaseEmbedder,
    configured_max_seq_length,
    offline_mode,
    weights_hash,
)
from ragindex.models.onnx_export import FP32_FILE, INPUT_NAMES, INT8_FILE

# Names the export recipe; a change to onnx_export that changes the files must bump it.
EXPORT_RECIPE = "torchscript-opset17-v1"
INT8_QUANTIZATION = "onnx-int8-dynamic-per-channel"
EXPORT_TIMEOUT_S = 900


def onnx_cache_root() -> Path:
    explicit = os.environ.get("RAGINDEX_ONNX_CACHE")
    if explicit:
        return Path(explicit)
    root = os.environ.get("RAGINDEX_CACHE") or str(Path.home() / ".cache" / "ragindex")
    return Path(root) / "onnx"


def check_mean_pooling_model(model_dir: Path) -> None:
    """The ONNX backends reproduce Transformer + mean Pooling (+ Normalize) models only."""
    modules_file = model_dir / "modules.json"
    pooling_file = model_dir / "1_Pooling" / "config.json"
    problem = ""
    if not (model_dir / "tokenizer.json").is_file():
        problem = "it has no tokenizer.json (a fast tokenizer)"
    elif not modules_file.is_file() or not pooling_file.is_file():
        problem = "it is not a sentence-transformers model (no modules.json / 1_Pooling)"
    else:
        kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in json.loads(modules_file.read_text())]
        pooling = json.loads(pooling_file.read_text())
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        if kinds[:2] != ["Transformer", "Pooling"] or set(kinds[2:]) - {"Normalize"}:
            problem = f"its modules are {kinds}, not Transformer, Pooling[, Normalize]"
        elif modes != ["pooling_mode_mean_tokens"]:
            problem = f"its pooling is {modes}, not mean pooling"
    if problem:
        raise InvalidInput(
            f"embedder backend onnx cannot run the model in {model_dir}: {problem};"
            " use backend sentence-transformers for it"
        )


def exported_model(model_dir: Path, weights_hash: str, int8: bool) -> Path:
    """The cached ONNX file for these weights, exported (in a child process) if missing."""
    out_dir = onnx_cache_root() / f"{weights_hash[:16]}-{EXPORT_RECIPE}"
    path = out_dir / (INT8_FILE if int8 else FP32_FILE)
    if path.is_file():
        return path
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be exporting the same files
        if not path.is_file():
            command = [sys.executable, "-m", "ragindex.models.onnx_export", str(model_dir)]
            command += [str(out_dir)] + (["--int8"] if int8 else [])
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False
            )
            if done.returncode != 0 or not path.is_file():
                raise BackendUnavailable(
                    f"exporting {model_dir} to ONNX failed (exit {done.returncode}):"
                    f" {done.stderr.strip()[-2000:]}"
                )
    return path


def file_hash(path: Path) -> str:
    """16 hex characters of blake2b over one file's bytes."""
    digest = hashlib.blake2b(digest_size=8)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def intra_op_threads() -> int:
    """OMP_NUM_THREADS if set (one per replica in Serve), else ONNX Runtime's default."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() else 0


class TokenCounter:
    """`count_tokens` of the ONNX backends from the model's tokenizer.json alone (no weights,
    no session): what a process that chunks, while another one embeds, counts with."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def __call__(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


class OnnxEmbedder(BaseEmbedder):
    """Backends `onnx` (fp32) and `onnx-int8`: ONNX Runtime + tokenizers + numpy pooling."""

    def __init__(self, spec: EmbedderSpec) -> None:
        super().__init__(spec)
        offline_mode()
        import onnxruntime
        from tokenizers import Tokenizer

        check_mean_pooling_model(self.model_dir)
        int8 = spec.backend == "onnx-int8"
        self.max_seq_length = configured_max_seq_length(self.model_dir, 512)
        self.tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        # tokenizer.json may fix a padding and truncation of its own (MiniLM's: 128 tokens).
        padding = self.tokenizer.padding or {"pad_id": 0, "pad_token": "[PAD]"}
        self.tokenizer.enable_truncation(self.max_seq_length)
        self.tokenizer.enable_padding(pad_id=padding["pad_id"], pad_token=padding["pad_token"])
        self.counter = TokenCounter(self.model_dir)
        self.model_file = exported_model(self.model_dir, weights_hash(self.model_dir), int8)
        # The int8 identity names the quantized weights themselves (the export is
        # deterministic), so a quantizer that changes them cannot mix vectors unnoticed.
        quantization = f"{INT8_QUANTIZATION}:{file_hash(self.model_file)}" if int8 else ""
        self._stamp(self._dimension(), quantization)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = intra_op_threads()
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(self.model_file), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self.session.get_inputs()} & set(INPUT_NAMES)
        self.one_text_per_call = int8

    def _dimension(self) -> int:
        pooling = json.loads((self.model_dir / "1_Pooling" / "config.json").read_text())
        return int(pooling["word_embedding_dimension"])

    def _encode(self, batch: list[str]) -> Any:
        # Dynamic int8 quantizes activations with one scale per call, so a text's int8 vector
        # would depend on the other texts (and padding) in its batch: one text per call.
        groups = [[t] for t in batch] if self.one_text_per_call else [batch]
        return np.concatenate([self._run(group) for group in groups], axis=0)

    def _run(self, texts: list[str]) -> Any:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
        weights = mask[..., None].astype(np.float32)
        summed = (hidden * weights).sum(axis=1)
        return summed / np.clip(weights.sum(axis=1), 1e-9, None)

    def count_tokens(self, text: str) -> int:
        return self.counter(text)
