"""The verdict corpus: faithful pairs must pass clean, pairs with one mistake must be named in
the right phase and place. Prints one row per pair and the totals (false alarms, misses, wrong
places).

Pairs:
* ResNet (PyTorch, torchvision layout) -> its MindSpore port, through ``netparity step``: the
  faithful port and every demo bug (``netparity demo --list-bugs``), at module level, and with
  ``--op`` the faithful port and the forward bugs at op level too;
* timm's Vision Transformer with AdamW (nobody here wrote it): against itself in float64,
  bfloat16 and on another thread count (faithful), with five transformer mistakes, and against
  an independent MindSpore port (faithful, four mistakes; ``--op`` adds op level);
* transformers' GPT-2 (nobody here wrote it) as a causal LM with AdamW, gradient clipping and
  warmup: against itself in float64 and on another thread count (faithful), five mistakes;
* timm's ConvNeXt, EfficientNet and RegNet (nobody here wrote them): against themselves in
  float64, bfloat16 with AdamW, another thread count, at op level; a norm-eps mistake each;
* torchvision's MobileNetV2 (nobody here wrote it) -> a PyTorch port with its conv+BN+ReLU6
  groups flattened (another module tree), through ``netparity compare``: faithful, and with the
  stem's BatchNorm eps copied from a Keras MobileNet (1e-3);
* torchvision's MobileNetV2 -> the same network from a MindSpore model zoo (``mindcv``'s
  ``mobilenet_v2_100``: flattened, renamed tree; weights converted through ``map_names``), eval
  forward through ``netparity compare``: faithful, a stem BatchNorm eps 1e-3, a depthwise conv
  without padding;
* a torch GRU -> the same GRU written per time step (GRUCell loop), through ``netparity
  compare`` at module and both levels: faithful, and a wrong hidden bias;
* transformers' LLaMA (GQA, rotary, RMSNorm) with AdamW, clipping and warmup -> an independent
  MindSpore port with Meta's module names: faithful, six LLM-port mistakes (``--op`` adds op
  level);
* a PyTorch U-Net (ConvTranspose, bilinear upsample, concatenation skips, ignore-index
  cross-entropy, warm-up + cosine LR stepped every iteration) -> an independent MindSpore port,
  through ``netparity step``: faithful (dynamic LR list, and a schedule cell) and an equivalent
  rewrite at module and both levels, four port mistakes (``tests/corpus/seg_pair.py``);
* a transformer block with tensor parallelism 2 (two gloo processes, column/row-parallel
  linears; ``netparity.examples.tp_block``) -> the same block unsharded on one process, ranks
  merged by the layout the capture recorded: faithful, rank 1's fc1 shard with a wrong bias,
  fc2 not all-reduced, fc2 divided by the world size twice.

Run (a few minutes per ResNet pair on 2 cores):
    .venv/bin/python benchmarks/corpus.py [--depth 18]
        [--only resnet|mobilenet|zoo|vit|msvit|gpt2|llama|timmcnn|gru|seg|bisect|tp] [--op]

``--only bisect``: ``netparity bisect`` on injected precision losses (a float16 LayerNorm, a
float16 softmax inside an attention, bfloat16 autocast everywhere in a 77-module transformer;
the ResNet-18 demo pair's same-pad and relu-approx port bugs, PyTorch -> MindSpore): the region
named, and the runs it took against the bound 2 * log2(modules) + 2.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.corpus.models: the MobileNetV2 port


def resnet_rows(depth: int, op: bool, bugs: list[str] | None) -> list[tuple[str, ...]]:
    from netparity.examples.resnet.bugs import BUGS, expected_place
    from netparity.workflow.step import run_step_parity

    opts = {"depth": depth, "batch_size": 2, "image_size": 56, "lr_max": 1e-3}
    cases: list[tuple[str | None, str]] = [(None, "module")]
    cases += [(b, "module") for b in (bugs or list(BUGS))]
    if op:
        cases += [(None, "op")] + [(b, "op") for b in (bugs or list(BUGS))
                                   if expected_place(b, depth)[0] == "forward"]
    rows = []
    for bug, level in cases:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            r = run_step_parity("netparity.examples.resnet.specs.torch_spec",
                                "netparity.examples.resnet.specs.ms_spec", Path(d) / "run",
                                steps=3, options=opts, cand_options={"bug": bug}, level=level,
                                free_running=False)
        got = (r.first_phase, r.where, r.first.step if r.first is not None else None)
        want = (None, None, None) if bug is None else expected_place(bug, depth)
        rows.append((f"resnet{depth} torch->mindspore", bug or "faithful", level,
                     _fmt(want), _fmt(got), _verdict(want, got),
                     f"{time.perf_counter() - t0:.0f} s"))
        print(" | ".join(rows[-1]), flush=True)
    return rows


def mobilenet_rows() -> list[tuple[str, ...]]:
    import torch
    from tests.corpus.models import copy_weights_in_order, flat_mobilenet_v2, torchvision_models

    import netparity

    tvm = torchvision_models()
    torch.manual_seed(0)
    ref = tvm.mobilenet_v2(num_classes=10)
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
    rows = []
    with tempfile.TemporaryDirectory() as d:
        def run(model: torch.nn.Module, path: Path) -> None:
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            with netparity.capture(model, str(path), payload="tensors", optimizer=opt) as cap:
                torch.manual_seed(1)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                cap.record_loss(loss)
                cap.step()

        cases = [("faithful", 1e-5, (None, None, None)),
                 ("bn-eps 1e-3 (Keras)", 1e-3, ("forward", "features.0.1", 0))]
        ports = []
        for _, eps, _ in cases:  # the ports start from the reference's *initial* weights
            ports.append(flat_mobilenet_v2(10, stem_bn_eps=eps))
            copy_weights_in_order(ref, ports[-1])
        run(ref, Path(d) / "ref")
        for (name, _, want), cand in zip(cases, ports):
            t0 = time.perf_counter()
            run(cand, Path(d) / name.split()[0])
            res = netparity.compare(Path(d) / "ref", Path(d) / name.split()[0])
            fd = res.first_divergence
            got = (None, None, None) if res else (
                fd.direction if fd else "params", fd.module if fd else "", fd.step if fd else 0)
            rows.append(("mobilenet_v2 tv -> flat port", name, "module", _fmt(want), _fmt(got),
                         _verdict(want, got), f"{time.perf_counter() - t0:.0f} s"))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def zoo_rows() -> list[tuple[str, ...]]:
    from tests.corpus import zoo_pair

    import netparity

    rows = []
    with tempfile.TemporaryDirectory() as d:
        ref = zoo_pair.torch_model()
        zoo_pair.capture_torch(ref, Path(d) / "ref")
        for bug in (None, *zoo_pair.BUGS):
            t0 = time.perf_counter()
            cand = zoo_pair.zoo_model(bug)
            zoo_pair.load_weights(ref, cand)
            zoo_pair.capture_zoo(cand, Path(d) / f"cand-{bug}")
            res = netparity.compare(Path(d) / "ref", Path(d) / f"cand-{bug}")
            fd = res.first_divergence
            want = (None, None, None) if bug is None else (
                "forward", zoo_pair.FOUND_AT[bug][0], 0)
            got = (None, None, None) if res else (
                fd.direction if fd else "params", fd.module if fd else "", fd.step if fd else 0)
            rows.append(("mobilenet_v2 tv -> mindcv (mindspore)", bug or "faithful", "module",
                         _fmt(want), _fmt(got), _verdict(want, got),
                         f"{time.perf_counter() - t0:.0f} s"))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def vit_rows(ms: bool, op: bool) -> list[tuple[str, ...]]:
    """timm's ViT (AdamW) against itself in other precisions/threads and with one mistake each
    (``tests/corpus/vit_spec.py``), and with ``ms`` against an independent MindSpore port
    (``tests/corpus/ms_vit_spec.py``), through ``netparity step``."""
    from tests.corpus import ms_vit_spec, vit_spec

    ref = str(Path(vit_spec.__file__))
    if ms:
        cand, pair = str(Path(ms_vit_spec.__file__)), "vit timm -> mindspore port"
        cases: list[tuple[str, dict, dict, str]] = [("faithful", {}, {}, "module")]
        cases += [(b, {}, {"bug": b}, "module") for b in ms_vit_spec.BUGS]
        if op:
            cases += [("faithful", {}, {}, "op")]
            cases += [(b, {}, {"bug": b}, "op") for b in ms_vit_spec.BUGS
                      if ms_vit_spec.FOUND_AT[b][0] == "forward"]
        found = ms_vit_spec.FOUND_AT
    else:
        cand, pair = ref, "vit timm -> timm (torch)"
        cases = [("faithful float64 candidate", {}, {"dtype": "float64"}, "module"),
                 ("faithful float64 reference", {"dtype": "float64"}, {}, "module"),
                 ("faithful bfloat16 candidate", {}, {"dtype": "bfloat16"}, "module")]
        cases += [(b, {}, {"bug": b}, "module") for b in vit_spec.BUGS]
        # last: torch's thread count is process-wide
        cases += [("faithful 1 vs 2 threads", {"threads": 2}, {"threads": 1}, "module")]
        found = vit_spec.FOUND_AT
    return _step_rows(pair, ref, cand, cases, found)


def gpt2_rows() -> list[tuple[str, ...]]:
    """transformers' GPT-2 (AdamW, clipping, warmup) against itself in float64 and on another
    thread count, and with five mistakes (``tests/corpus/gpt2_spec.py``); with dropout 0.1 too
    (transformers' default), faithful and with one mistake."""
    from tests.corpus import gpt2_spec

    spec = str(Path(gpt2_spec.__file__))
    cases: list[tuple[str, dict, dict, str]] = [
        ("faithful float64 candidate", {}, {"dtype": "float64"}, "module")]
    cases += [(b, {}, {"bug": b}, "module") for b in gpt2_spec.BUGS]
    cases += [("faithful 1 vs 2 threads", {"threads": 2}, {"threads": 1}, "module")]
    cases += [("equivalent rewrite: the loss written out (log-softmax, gather, masked mean)",
               {}, {"hand_loss": True}, "module")]
    cases += [("faithful float64, dropout 0.1 (transformers' default)", {"dropout": 0.1},
               {"dropout": 0.1, "dtype": "float64"}, "module"),
              ("ln-eps, dropout 0.1", {"dropout": 0.1}, {"dropout": 0.1, "bug": "ln-eps"},
               "module")]
    return _step_rows("gpt2 transformers -> itself (torch)", spec, spec, cases,
                      {**gpt2_spec.FOUND_AT, "ln-eps, dropout 0.1": gpt2_spec.FOUND_AT["ln-eps"]})


def timm_cnn_rows() -> list[tuple[str, ...]]:
    """timm's ConvNeXt, EfficientNet and RegNet against themselves in float64, bfloat16 with
    AdamW, on another thread count and at op level, and with one norm-eps mistake each
    (``tests/corpus/timm_cnn_spec.py``)."""
    from tests.corpus import timm_cnn_spec

    spec = str(Path(timm_cnn_spec.__file__))
    rows = []
    for arch, name, ropt, copt, level in (
            ("convnext_atto", "faithful float64 candidate", {}, {"dtype": "float64"}, "module"),
            ("convnext_atto", "faithful float64, op level", {}, {"dtype": "float64"}, "op"),
            ("convnext_atto", "faithful bfloat16 + AdamW", {"opt": "adamw"},
             {"dtype": "bfloat16"}, "module"),
            ("efficientnet_b0", "faithful float64 candidate", {}, {"dtype": "float64"},
             "module"),
            ("efficientnet_b0", "faithful float64, 32 px batch 2 (2 values per BatchNorm "
             "channel)", {"image_size": 32, "batch_size": 2}, {"dtype": "float64"}, "module"),
            ("regnetx_002", "faithful 1 vs 2 threads", {}, {"threads": 2}, "module"),
            ("efficientnet_b0", "bn-eps", {}, {"bug": "bn-eps"}, "module"),
            ("convnext_atto", "ln-eps", {}, {"bug": "ln-eps"}, "module")):
        ropt = {"arch": arch, **ropt}
        rows += _step_rows(f"timm {arch} -> itself (torch)", spec, spec,
                           [(name, ropt, {**ropt, **copt}, level)], timm_cnn_spec.FOUND_AT)
    return rows


def llama_rows(op: bool) -> list[tuple[str, ...]]:
    """transformers' LLaMA (GQA, rotary, RMSNorm; AdamW, clipping, warmup) against an
    independent MindSpore port with Meta's module names (``tests/corpus/llama_spec.py``,
    ``tests/corpus/ms_llama_spec.py``): faithful and six classic LLM-port mistakes at module
    level; with ``op`` the faithful port and the forward mistakes at op level too."""
    from tests.corpus import llama_spec, ms_llama_spec

    cases: list[tuple[str, dict, dict, str]] = [("faithful", {}, {}, "module")]
    cases += [(b, {}, {"bug": b}, "module") for b in ms_llama_spec.BUGS]
    if op:
        cases += [("faithful", {}, {}, "op")]
        cases += [(b, {}, {"bug": b}, "op") for b in ms_llama_spec.BUGS
                  if ms_llama_spec.FOUND_AT[b][0] == "forward"]
    return _step_rows("llama transformers -> mindspore port", str(Path(llama_spec.__file__)),
                      str(Path(ms_llama_spec.__file__)), cases, ms_llama_spec.FOUND_AT)


def seg_rows() -> list[tuple[str, ...]]:
    """A PyTorch U-Net against an independent MindSpore port (``tests/corpus/seg_pair.py``):
    the faithful port (dynamic LR list; a ``LearningRateSchedule`` cell) and an equivalent
    rewrite (hand-written loss, functional resize, the skip concatenated the other way round,
    an emulated transposed convolution) at module and both levels, and four port mistakes."""
    from tests.corpus import seg_pair

    spec = str(Path(seg_pair.__file__))
    ms = {"framework": "mindspore"}
    rewrite = "equivalent rewrite: hand loss, ResizeBilinearV2, concat swapped, emulated deconv"
    cases: list[tuple[str, dict, dict, str]] = [
        ("faithful", {}, ms, "module"), ("faithful", {}, ms, "both"),
        ("faithful, schedule as a LearningRateSchedule cell", {}, {**ms, "lr_cell": True},
         "module"),
        (rewrite, {}, {**ms, "rewrite": True}, "module"),
        (rewrite, {}, {**ms, "rewrite": True}, "both")]
    cases += [(b, {}, {**ms, "bug": b}, "module") for b in seg_pair.BUGS]
    return _step_rows("u-net torch -> mindspore port", spec, spec, cases, seg_pair.FOUND_AT)


def _step_rows(pair: str, ref: str, cand: str, cases: list[tuple[str, dict, dict, str]],
               found: dict) -> list[tuple[str, ...]]:
    """One ``netparity step`` run (3 steps, no eval) per case: (name, reference options,
    candidate options, level); the row says whether the answer is the expected one."""
    from netparity.workflow.step import run_step_parity

    rows = []
    for name, ropt, copt, level in cases:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            r = run_step_parity(ref, cand, Path(d) / "run", steps=3, ref_options=ropt,
                                cand_options=copt, level=level, run_eval=False,
                                free_running=False)
        got = (r.first_phase, r.where, r.first.step if r.first is not None else None)
        want = found.get(name, (None, None, None))
        rows.append((pair, name, level, _fmt(want), _fmt(got), _verdict(want, got),
                     f"{time.perf_counter() - t0:.0f} s"))
        print(" | ".join(rows[-1]), flush=True)
    return rows


def gru_rows() -> list[tuple[str, ...]]:
    """A torch GRU against the same GRU written per time step (tests/corpus/gru_pair.py):
    faithful at module and both levels (the per-step ops are restructured, never a
    divergence), and a wrong hidden bias named at the GRU."""
    from tests.corpus.gru_pair import gru_pair

    rows = []
    for bug, level in ((False, "module"), (False, "both"), (True, "module"), (True, "both")):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            res = gru_pair(Path(d), bug, level=level)
        fd = res.first_divergence
        want = ("forward", "rnn", 0) if bug else (None, None, None)
        got = (None, None, None) if res else (
            fd.direction if fd else "params", fd.module if fd else "", fd.step if fd else 0)
        rows.append(("nn.GRU -> GRUCell per step", "bias_hh +0.1" if bug else "faithful",
                     level, _fmt(want), _fmt(got), _verdict(want, got),
                     f"{time.perf_counter() - t0:.0f} s"))
        print(" | ".join(rows[-1]), flush=True)
    return rows


def both_rows(only: str | None, depth: int) -> list[tuple[str, ...]]:
    """The faithful and equivalent-rewrite rows at ``--level both`` (issue 28: op level is never
    worse than module level): compare pairs captured at both levels (the mindcv zoo
    MobileNetV2 and DenseNet, a tanh GELU as one op against its formula), and ``netparity
    step`` pairs (ResNet, the MindSpore ViT and LLaMA ports, GPT-2 with the loss written out,
    ConvNeXt in float64 and in bfloat16 with AdamW, RegNet and ViT on 1 against 2 threads, ViT
    in bfloat16). The GRU and U-Net families hold their own ``both`` rows."""
    rows: list[tuple[str, ...]] = []
    if only in (None, "zoo", "densenet", "gelu"):
        rows += _compare_both_rows(only)
    step_cases: list[tuple[str, str, str, str, dict, dict]] = []
    if only in (None, "resnet"):
        step_cases.append((f"resnet{depth} torch->mindspore", "faithful",
                           "netparity.examples.resnet.specs.torch_spec",
                           "netparity.examples.resnet.specs.ms_spec",
                           {"depth": depth, "batch_size": 2, "image_size": 56, "lr_max": 1e-3},
                           {"depth": depth, "batch_size": 2, "image_size": 56, "lr_max": 1e-3}))
    if only in (None, "msvit"):
        from tests.corpus import ms_vit_spec, vit_spec

        step_cases.append(("vit timm -> mindspore port", "faithful", str(Path(vit_spec.__file__)),
                           str(Path(ms_vit_spec.__file__)), {}, {}))
    if only in (None, "llama"):
        from tests.corpus import llama_spec, ms_llama_spec

        step_cases.append(("llama transformers -> mindspore port", "faithful",
                           str(Path(llama_spec.__file__)), str(Path(ms_llama_spec.__file__)),
                           {}, {}))
    if only in (None, "gpt2"):
        from tests.corpus import gpt2_spec

        spec = str(Path(gpt2_spec.__file__))
        step_cases.append(("gpt2 transformers -> itself (torch)",
                           "equivalent rewrite: the loss written out", spec, spec, {},
                           {"hand_loss": True}))
    if only in (None, "timmcnn"):
        from tests.corpus import timm_cnn_spec

        spec = str(Path(timm_cnn_spec.__file__))
        arch = {"arch": "convnext_atto"}
        step_cases.append(("timm convnext_atto -> itself (torch)", "faithful float64 candidate",
                           spec, spec, arch, {**arch, "dtype": "float64"}))
        step_cases.append(("timm convnext_atto -> itself (torch)", "faithful bfloat16 + AdamW",
                           spec, spec, {**arch, "opt": "adamw"},
                           {**arch, "opt": "adamw", "dtype": "bfloat16"}))
        regnet = {"arch": "regnetx_002"}
        step_cases.append(("timm regnetx_002 -> itself (torch)", "faithful 1 vs 2 threads",
                           spec, spec, {**regnet, "threads": 2}, {**regnet, "threads": 1}))
    if only in (None, "vit"):
        from tests.corpus import vit_spec

        spec = str(Path(vit_spec.__file__))
        step_cases.append(("vit timm -> timm (torch)", "faithful bfloat16 candidate", spec, spec,
                           {}, {"dtype": "bfloat16"}))
        # last: torch's thread count is process-wide
        step_cases.append(("vit timm -> timm (torch)", "faithful 1 vs 2 threads", spec, spec,
                           {"threads": 2}, {"threads": 1}))
    for pair, name, ref, cand, ropt, copt in step_cases:
        rows += _step_rows(pair, ref, cand, [(name, ropt, copt, "both")], {})
    return rows


def _compare_both_rows(only: str | None) -> list[tuple[str, ...]]:
    """Faithful compare pairs captured at both levels, compared at ``--level both``."""
    from tests.corpus import densenet_pair, gelu_pair, zoo_pair

    import netparity

    families = [("zoo", "mobilenet_v2 tv -> mindcv (mindspore)", zoo_pair, zoo_pair.zoo_model,
                 zoo_pair.capture_zoo),
                ("densenet", "densenet tv -> mindcv (mindspore)", densenet_pair,
                 densenet_pair.zoo_model, densenet_pair.capture_zoo),
                ("gelu", "tanh GELU op -> its formula (mindspore)", gelu_pair,
                 gelu_pair.ms_model, gelu_pair.capture_ms)]
    rows = []
    for key, pair, mod, make, capture in families:
        if only not in (None, key):
            continue
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            ref = mod.torch_model()
            mod.capture_torch(ref, Path(d) / "ref", level="both")
            cand = make(None)
            mod.load_weights(ref, cand)
            capture(cand, Path(d) / "cand", level="both")
            res = netparity.compare(Path(d) / "ref", Path(d) / "cand", level="both")
        fd = res.first_divergence
        got = (None, None, None) if res else (
            fd.direction if fd else "params", fd.module if fd else "", fd.step if fd else 0)
        want = (None, None, None)
        rows.append((pair, "faithful", "both", _fmt(want), _fmt(got), _verdict(want, got),
                     f"{time.perf_counter() - t0:.0f} s"))
        print(" | ".join(rows[-1]), flush=True)
    return rows


def bisect_rows() -> list[tuple[str, ...]]:
    """``netparity bisect`` cases: (pair, case, "module", expected region, region named,
    verdict, time and runs)."""
    from netparity.bisect import run_bisect

    tiny = str(ROOT / "tests" / "bisection" / "tiny_vit_spec.py")
    resnet = "netparity.examples.resnet.specs."
    cases = [
        ("tiny transformer fp32->fp32", tiny, tiny, {"gain": 8}, {}, None),
        ("tiny transformer fp32->fp16 LayerNorm", tiny, tiny, {"gain": 8},
         {"lowp_norm": "blocks.4.norm2"}, "blocks.4.norm2"),
        ("tiny transformer fp32->fp16 softmax", tiny, tiny, {"gain": 8},
         {"lowp_softmax": "blocks.2.attn"}, "blocks.2.attn"),
        ("tiny transformer fp32->bf16 autocast", tiny, tiny, {"gain": 8},
         {"autocast": "bfloat16"}, "embed"),
        ("ResNet-18 torch->MindSpore same-pad", resnet + "torch_spec", resnet + "ms_spec",
         {"image_size": 32}, {"bug": "same-pad"}, "layer2.0.conv1"),
        ("ResNet-18 torch->MindSpore relu-approx", resnet + "torch_spec", resnet + "ms_spec",
         {"image_size": 32}, {"bug": "relu-approx"}, "layer1.0.relu"),
    ]
    rows = []
    for name, ref, cand, opts, cand_opts, want in cases:
        t0 = time.perf_counter()
        r = run_bisect(ref, cand, options=opts, cand_options=cand_opts)
        got = r.region
        ok = "ok" if got == want and r.runs_total <= r.budget else (
            "FALSE ALARM" if want is None else "MISS" if got is None else "WRONG PLACE")
        rows.append((name, "faithful" if want is None else f"injected at {want}", "module",
                     str(want), f"{r.verdict} {got or ''}".strip(), ok,
                     f"{time.perf_counter() - t0:.0f} s, {r.runs_total} runs "
                     f"(bound {r.budget:.1f}, {r.modules} modules)"))
        print(" | ".join(rows[-1]), flush=True)
    return rows


def tp_rows() -> list[tuple[str, ...]]:
    """A TP-2 transformer block (2 gloo processes) against the block unsharded, its ranks
    merged by the recorded layout (``compare.shards``): faithful, three TP mistakes."""
    from netparity.analyzers.divergence import compare
    from netparity.compare.shards import merged_sides
    from netparity.examples import tp_block
    from netparity.trace import open_trace

    cases = {None: ("faithful", (None, None, None)),
             "bias": ("rank 1 fc1 shard bias +0.5", ("forward", "mlp.fc1", 0)),
             "no-allreduce": ("fc2 not all-reduced", ("forward", "mlp.fc2", 0)),
             "twice": ("fc2 divided by world twice", ("forward", "mlp.fc2", 0))}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        tp_block.run_ref(Path(d) / "ref")
        tp_block.run_tps({b: Path(d) / str(b) for b in cases})
        per = (time.perf_counter() - t0) / (len(cases) + 1)
        for bug, (name, want) in cases.items():
            t1 = time.perf_counter()
            with open_trace(Path(d) / "ref") as ref, open_trace(Path(d) / str(bug)) as cand, \
                    merged_sides(ref, cand) as (r, c, _):
                got = _said(compare(r, c))
            rows.append(("TP-2 block (gloo) -> unsharded", name, "module", _fmt(want), _fmt(got),
                         _verdict(want, got), f"{per + time.perf_counter() - t1:.0f} s"))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def _said(res: object) -> tuple:
    """(direction, module, step) of a result's first divergence; Nones when it passes."""
    if res:
        return (None, None, None)
    fd = getattr(res, "first_divergence", None)
    return (fd.direction, fd.module, fd.step) if fd else ("params", "", 0)


def _fmt(t: tuple) -> str:
    return "pass" if t[0] is None else f"{t[0]} @ {t[1]} (step {t[2]})"


def _verdict(want: tuple, got: tuple) -> str:
    if want[0] is None:
        return "ok" if got[0] is None else "FALSE ALARM"
    if got[0] is None:
        return "MISS"
    return "ok" if tuple(want) == tuple(got) else "WRONG PLACE"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depth", type=int, default=18)
    ap.add_argument("--only", choices=("resnet", "mobilenet", "zoo", "vit", "msvit", "gpt2",
                                       "llama", "timmcnn", "gru", "seg", "densenet", "gelu",
                                       "bisect", "tp"))
    ap.add_argument("--op", action="store_true",
                    help="also op level (ResNet, the MindSpore ViT and LLaMA ports)")
    ap.add_argument("--bugs", help="comma-separated subset of the demo bugs")
    ap.add_argument("--both", action="store_true",
                    help="only the faithful and equivalent-rewrite rows at --level both "
                         "(with --only: one family; also densenet, gelu)")
    args = ap.parse_args()
    print("pair | case | level | expected | netparity said | verdict | time")
    rows = []
    if args.both:
        rows += both_rows(args.only, args.depth)
        args.only = "none"  # nothing else
    if args.only in (None, "tp"):
        rows += tp_rows()
    if args.only in (None, "gru"):
        rows += gru_rows()
    if args.only in (None, "seg"):
        rows += seg_rows()
    if args.only in (None, "mobilenet"):
        rows += mobilenet_rows()
    if args.only in (None, "zoo"):
        rows += zoo_rows()
    if args.only in (None, "vit"):
        rows += vit_rows(ms=False, op=args.op)
    if args.only in (None, "timmcnn"):
        rows += timm_cnn_rows()
    if args.only in (None, "gpt2"):
        rows += gpt2_rows()
    if args.only in (None, "msvit"):
        rows += vit_rows(ms=True, op=args.op)
    if args.only in (None, "llama"):
        rows += llama_rows(op=args.op)
    if args.only in (None, "bisect"):
        rows += bisect_rows()
    if args.only in (None, "resnet"):
        rows += resnet_rows(args.depth, args.op, args.bugs.split(",") if args.bugs else None)
    faithful = [r for r in rows if r[1].startswith(("faithful", "equivalent"))]
    bugs = [r for r in rows if r not in faithful]
    print(f"\n{len(rows)} pairs: {len(faithful)} faithful, {len(bugs)} with one mistake; "
          f"false alarms {sum(r[5] == 'FALSE ALARM' for r in rows)}, "
          f"misses {sum(r[5] == 'MISS' for r in rows)}, "
          f"wrong place {sum(r[5] == 'WRONG PLACE' for r in rows)}")
    return 0 if all(r[5] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
