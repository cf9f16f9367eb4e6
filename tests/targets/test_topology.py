"""Topologies: their names, the engines' names and ports, the proxies between them, and the
stack description every tool reads (no stack is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.errors import ConfigError
from chaos.observe.pipeline import ENGINE_QUEUES, Metric, on_engines
from chaos.observe.sampler import metrics_urls
from chaos.system.ports import STACK_PORTS, PortPlan
from chaos.system.topology import Topology, link_ends, link_of
from chaos.targets.embedded import EmbeddedStack
from chaos.targets.stack import StackConfig, StackInfo


@pytest.mark.parametrize(("text", "engines"), [
    ("1p1d", ("prefill", "decode")),
    ("2P1D", ("prefill", "prefill2", "decode")),
    ("1p2d", ("prefill", "decode", "decode2")),
    ("2p2d", ("prefill", "prefill2", "decode", "decode2")),
])  # fmt: skip
def test_a_topology_names_its_engines(text, engines):
    topology = Topology.parse(text)
    assert topology.engines == engines and topology.name == text.lower()


@pytest.mark.parametrize("text", ["", "1p", "3p1d", "0p1d", "p1d", "2x2"])
def test_a_topology_beyond_two_of_a_kind_or_misspelt_is_refused(text):
    with pytest.raises(ConfigError):
        Topology.parse(text)


def test_each_link_ends_at_its_numbered_engine_and_the_first_of_the_other_kind():
    assert link_ends("kv") == ("prefill", "decode")
    assert link_ends("kv2") == ("prefill", "decode2")
    assert link_ends("bootstrap2") == ("prefill2", "decode")
    assert link_of("control", "prefill2") == "control2" and link_of("kv", "decode") == "kv"
    with pytest.raises(ConfigError):
        link_ends("client_router")


def test_a_2p2d_stack_lays_out_every_engine_on_ports_of_its_own():
    info = StackInfo.planned("embedded", StackConfig(port_base=20000, topology=Topology(2, 2)), "run")
    assert info.config["topology"] == "2p2d" and info.topology == Topology(2, 2)
    assert set(info.proxies) == {"client_router", "bootstrap", "control", "kv", "bootstrap2", "control2", "kv2"}
    ports = [int(u.rsplit(":", 1)[1].split("/")[0]) for u in info.endpoints.values()]
    ports += [int(p[end].rsplit(":", 1)[1]) for p in info.proxies.values() for end in ("listen", "upstream")]
    assert all(20000 <= p < 20000 + STACK_PORTS for p in ports)
    listening = [int(p["listen"].rsplit(":", 1)[1]) for p in info.proxies.values()]
    assert len(set(listening)) == len(listening)
    assert set(metrics_urls(info.endpoints)) == {"prefill", "prefill2", "decode", "decode2", "router", "toxiproxy"}


def test_smg_is_given_every_worker_each_prefill_with_the_bootstrap_proxy_decode_reaches():
    cfg = StackConfig(port_base=20000, topology=Topology(2, 2), state_dir=Path("/nonexistent"))
    info = StackInfo.planned("embedded", cfg, "run")
    specs = EmbeddedStack._specs(cfg, PortPlan(20000), Path("/x"))
    argv = list(specs["router"].argv)
    prefills = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--prefill"]
    decodes = [argv[i + 1] for i, a in enumerate(argv) if a == "--decode"]
    assert prefills == [
        [info.endpoints["prefill"], info.proxies["bootstrap"]["listen"].rsplit(":", 1)[1]],
        [info.endpoints["prefill2"], info.proxies["bootstrap2"]["listen"].rsplit(":", 1)[1]],
    ]
    assert decodes == [info.endpoints["decode"], info.endpoints["decode2"]]
    assert set(specs) == {"toxiproxy", "prefill", "prefill2", "decode", "decode2", "router"}
    assert EmbeddedStack._waves(Topology(2, 2)) == [
        ("toxiproxy",), ("prefill", "prefill2", "decode", "decode2"), ("router",)
    ]  # fmt: skip


def test_engine_gauges_are_read_on_every_engine_of_their_kind():
    gauges = on_engines([*ENGINE_QUEUES[:1], Metric("router", "x")], ("prefill", "prefill2", "decode"))
    first = ENGINE_QUEUES[0]
    assert gauges == (Metric("prefill", first.name), Metric("prefill2", first.name), Metric("router", "x"))
