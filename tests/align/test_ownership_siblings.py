"""Module trees paired by structure as a whole: a layer the weight mapping leaves open (several
equal candidates) follows its paired numbered siblings -- a conv paired two places over takes
its BatchNorm with it -- instead of falling back to the module of the same index."""

from __future__ import annotations

from netparity.align.ownership import follow_siblings, modules_by_ownership

# conv + BatchNorm groups (Sequential), equal BatchNorms everywhere
REF = [("f.0.0.weight", (8, 3, 3, 3)), ("f.0.1.weight", (8,)), ("f.0.1.bias", (8,)),
       ("f.1.0.weight", (8, 8, 3, 3)), ("f.1.1.weight", (8,)), ("f.1.1.bias", (8,)),
       ("f.2.0.weight", (8, 8, 1, 1)), ("f.2.1.weight", (8,)), ("f.2.1.bias", (8,))]
# the port flattens the groups into the parent (conv, BN, activation: every index shifted)
# and ends with one more BatchNorm, so the tail's layer sequences differ: two candidates
CAND = [("f.0.weight", (8, 3, 3, 3)), ("f.1.gamma", (8,)), ("f.1.beta", (8,)),
        ("f.3.weight", (8, 8, 3, 3)), ("f.4.gamma", (8,)), ("f.4.beta", (8,)),
        ("f.6.weight", (8, 8, 1, 1)), ("f.7.gamma", (8,)), ("f.7.beta", (8,)),
        ("f.9.gamma", (8,)), ("f.9.beta", (8,))]


def test_batchnorm_follows_its_conv_where_the_weights_leave_it_open():
    m = modules_by_ownership(REF, CAND)
    assert m["f.2.0"] == "f.6"
    assert m["f.2.1"] == "f.7"  # not left to pairing by index


def test_follow_siblings_needs_one_shift_and_a_free_target():
    known = {"a.1.0": "b.3", "a.1.1": "b.4"}
    assert follow_siblings(["a.1.2"], ["b.2", "b.5"], known) == {"a.1.2": "b.5"}
    assert follow_siblings(["a.1.2"], ["b.2"], known) == {}  # its place does not exist
    assert follow_siblings(["a.1.2"], ["b.4"], known) == {}  # taken already
    assert follow_siblings(["a.1.2"], ["b.5"], {**known, "a.1.3": "b.9"}) == {}  # two shifts
    assert follow_siblings(["a.1.x"], ["b.5"], known) == {}  # only numbered children
