"""§12 ``spec.replicas`` read from manifests: one role becomes its instances (desired state)."""

from __future__ import annotations

import attrs

from reconciler.core.desired import RoleSpec, Runtime, Mode, ServeSpec
from reconciler.core.instances import instances
from reconciler.manifests import loader
from reconciler.planner import identity

MODEL = b"""apiVersion: reconciler/v1
kind: Model
metadata: {name: m}
spec:
  format: gguf
  root: /srv/models/m
  shards:
    - {path: m.gguf, size: 100, sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}
---
apiVersion: reconciler/v1
kind: NodeConfig
metadata: {name: box}
spec:
  allowed_ports: {from: 8000, to: 8099}
  serve_programs: {llamacpp: /opt/llama-server}
---
"""


def _role(extra: str) -> bytes:
    return MODEL + (b"apiVersion: reconciler/v1\nkind: InferenceSpec\nmetadata: {name: chat}\n"
                    b"spec: {runtime: llamacpp, mode: managed, model: m, serve: {port: 8091}"
                    + extra.encode() + b"}\n")


def _load(text: bytes):
    result = loader.load([("set.yaml", text)])
    assert result.desired is not None, [str(p) for p in result.problems]
    return result.desired


def test_replicas_become_instances_on_consecutive_ports() -> None:
    """§12 replicas: 3 → instances chat, chat/1, chat/2 on serve.port, +1, +2, each with its
    group and index, and an instance id (its directory) without '/'."""
    desired = _load(_role(", replicas: 3"))
    got = [(r.name, r.serve.port, r.group, r.replica, r.replicas) for r in desired.roles]
    assert got == [("chat", 8091, "chat", 0, 3), ("chat/1", 8092, "chat", 1, 3),
                   ("chat/2", 8093, "chat", 2, 3)]
    ids = [identity.instance_id(r) for r in desired.roles]
    assert all("/" not in i for i in ids) and len(set(ids)) == 3
    assert ids[1].startswith("chat.1-")


def test_one_replica_is_the_role_as_before() -> None:
    """§12 no replicas (or replicas: 1): one role, its own name, group == name, replica 0."""
    plain = _load(_role(""))
    one = _load(_role(", replicas: 1"))
    assert [r.name for r in plain.roles] == ["chat"] == [r.name for r in one.roles]
    assert plain.roles[0].group == "chat" and plain.roles[0].replica == 0
    assert identity.instance_id(plain.roles[0]) == identity.instance_id(one.roles[0])


def test_instance_zero_keeps_its_launch_when_replicas_change() -> None:
    """§12 scaling 1 → 3 does not change instance 0's launch (nothing running restarts)."""
    one = _load(_role(""))
    three = _load(_role(", replicas: 3"))
    models = {m.name: m for m in one.models}
    a = identity.launch(one.roles[0], models, one.node, {}, "/d")
    b = identity.launch(three.roles[0], models, three.node, {}, "/d")
    assert a is not None and b is not None and a.digest == b.digest


def test_shared_by_replicas_is_read() -> None:
    """§12 placement.devices.shared_by_replicas: true is carried by every instance."""
    desired = _load(_role(", replicas: 2, placement: {devices: {count: 1, shared_by_replicas: true}}")
                    .replace(b"serve_programs", b"devices: [{id: 'cuda:0', memory: 24GB}]\n  serve_programs"))
    assert [r.shared_by_replicas for r in desired.roles] == [True, True]


def test_instances_helper() -> None:
    """§12 ``instances``: a role of one replica is itself; N replicas keep every field but
    the name and port."""
    base = RoleSpec(name="chat", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED,
                    serve=ServeSpec(port=9000))
    assert instances(base) == (base,)
    many = instances(attrs.evolve(base, replicas=3))
    assert [(r.name, r.serve.port) for r in many] == [("chat", 9000), ("chat/1", 9001),
                                                       ("chat/2", 9002)]
    assert all(attrs.evolve(r, name="chat", serve=base.serve) == many[0] for r in many)


def test_validate_warns_when_the_instances_do_not_all_fit_the_devices() -> None:
    """§12/§7.1 validate places N instances of a role, never two on one device: three
    replicas of one GPU each on two GPUs warn for chat/2; shared_by_replicas does not."""
    node = b"devices: [{id: 'cuda:0', memory: 24GB}, {id: 'cuda:1', memory: 24GB}]\n  serve_programs"
    apart = loader.load([("set.yaml", _role(", replicas: 3, placement: {devices: {count: 1}}")
                          .replace(b"serve_programs", node))])
    said = [p.message for p in apart.warnings if p.path == "$.spec.devices"]
    assert len(said) == 1 and "chat/2 needs" in said[0] and "never share" in said[0], said
    shared = loader.load([("set.yaml", _role(
        ", replicas: 3, placement: {devices: {count: 1, shared_by_replicas: true}}")
        .replace(b"serve_programs", node))])
    assert not [p for p in shared.warnings if p.path == "$.spec.devices"]
