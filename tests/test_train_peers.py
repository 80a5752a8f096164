"""`perflab bench train`'s peers (perflab.measure.peers): the ratios its printout quotes."""
import pytest

from perflab.measure import peers


def rows(epochs: dict, H="1024", B=3200) -> list[dict]:
    return [{"H": H, "B": B, "N": 60000, "peer": name, "epoch_ms": ms} for name, ms in epochs.items()]


def test_each_perflab_peer_is_set_against_the_floor_and_the_fastest_peer_of_its_own_precision():
    epochs = {"perflab": 5.0, "cublas 5-gemm floor": 4.0, "jax scan epoch": 8.0, "pytorch cuda graph": 10.0,
              "pytorch cuda graph (TF32)": 2.5, "perflab (wgmma gemm)": 2.0, "perflab (bf16)": 1.2,
              "cublas floor (bf16)": 1.0, "jax scan epoch (bf16)": 2.4, "pytorch cuda graph (bf16 autocast)": 3.0,
              "perflab (fp16)": 1.5}
    ratios = peers.epoch_ratios(rows(epochs) + rows({k: 2 * v for k, v in epochs.items()}, B=12000))
    got = ratios[("1024", 3200)].to_dict()
    assert got == {"perflab / cublas 5-gemm floor": 1.25, "perflab / fastest FP32 peer": 0.625,  # not the TF32 graph
                   "perflab (wgmma gemm) / fastest TF32 peer": 0.8,  # a TF32 GEMM against TF32's peers, no FP32 floor
                   "perflab (bf16) / cublas floor (bf16)": 1.2, "perflab (bf16) / fastest bf16 peer": 0.5}
    assert ratios[("1024", 12000)].to_dict() == got  # a column a config
    assert peers.epoch_ratios(rows({"perflab (fp16)": 1.5, "jax scan epoch (bf16)": 2.4})) is None  # nothing of its own


def test_every_peer_runs_in_the_precision_its_name_or_its_options_say():
    """A peer whose name says bf16, fp16, TF32 or 3xTF32 carries that precision; a perflab peer the one its dtype or
    GEMM runs in (its wgmma and tf32 GEMMs are TF32 whatever the name says); any other peer FP32."""
    spellings = {"3xTF32": ("3xtf32", "x3tf32"), "TF32": ("tf32",), "bf16": ("bf16",), "fp16": ("fp16",)}  # first first
    by_options = {"bfloat16": "bf16", "float16": "fp16", "tf32": "TF32", "wgmma": "TF32", "x3tf32": "3xTF32"}
    for name, run in peers.PEERS.items():
        said = [kind for kind, words in spellings.items() if any(w in name.lower() for w in words)]
        options = [by_options[v] for v in (run.keywords.get("dtype"), run.keywords.get("gemm")) if v in by_options]
        want = options[0] if options else said[0] if said else "FP32"
        assert run.precision == want and peers.precision(name) == want, name
    assert peers.precision("perflab (wgmma gemm, a graph a batch)") == "TF32"
    assert peers.precision("perflab") == peers.precision("no such peer") == "FP32"


@pytest.mark.parametrize("peer", sorted(peers.FLOORS.values()))
def test_each_floor_is_a_peer(peer):
    assert peer in peers.PEERS
