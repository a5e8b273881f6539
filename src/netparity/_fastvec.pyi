"""Type stub of the C kernel built from _fastvec.c (optional; see setup.py)."""

from typing import Any

def stats(buffer: Any, threads: int = 1, shift: float = 0.0, /
          ) -> tuple[float, float, float, float, float, int]:
    """(min, max, sum, sum_sq, abs_sum, zeros) of a C-contiguous float32/float64 buffer - shift."""

def vec(buffer: Any, threads: int = 1, /) -> list[float] | None:
    """The 12-number statistics vector (hoststats.finite_vec), or None (needs the exact path)."""

def stats_sum(buffers: Any, threads: int = 1, shift: float = 0.0, last: bool = False, /
              ) -> tuple[Any, ...]:
    """stats() of the element-wise float32 sum of 2..8 equal-length float32 buffers; with
    last, followed by stats(buffers[-1], threads) from the same pass (12 numbers)."""

def stats_many(buffers: Any, threads: int = 1, vectors: bool = False, /) -> list[Any]:
    """[stats(b, threads) for b in buffers] (with vectors: [vec(b, threads) ...]), every
    buffer's parts in one parallel region."""

def stats_relu(buffer: Any, threads: int = 1, /
               ) -> tuple[float, float, float, float, float, int, float, float, int]:
    """stats() of a float32 buffer + (sum, sum_sq) of max(x, 0) and the count of x > 0."""

def use_avx512(flag: bool | None = None, /) -> bool:
    """Whether the AVX-512 loops run; False selects the portable loops (tests)."""

def bind_openmp(prefer: str = "", /) -> str | None:
    """Run threads >= 2 on the loaded OpenMP runtime (path containing prefer first)."""

def unbind_openmp() -> None:
    """threads >= 2 use POSIX threads again."""

def pair_update(ref: Any, ref_kind: int, cand: Any, cand_kind: int, dstate: Any, istate: Any,
                hist: Any, base: int, numel: int, chunk: int, stride: int, scale: float,
                rtol: float, atol: float, /) -> None:
    """Add elements [base, base + n) of a tensor pair (stored bits; kinds 0 float64, 1 float32,
    2 float16, 3 bfloat16) to its running error metrics (netparity.compare.metrics)."""
