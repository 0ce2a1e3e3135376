"""Ingest fixtures: one thread per library (the packaged MiniLM comes from tests/conftest.py)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import faiss
import torch

torch.set_num_threads(1)
faiss.omp_set_num_threads(1)
