"""Instance ids, the child's environment and the launch digest (reconciler.identity)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from reconciler.planner import identity
from reconciler.core.desired import (
    MemorySpec,
    Mode,
    ModelFile,
    ModelFormat,
    ModelSpec,
    NodeConfig,
    RestartPolicy,
    RoleSpec,
    RunAs,
    Runtime,
    ServeSpec,
)

MODEL = ModelSpec(name="tiny", format=ModelFormat.GGUF, root="/m",
                  shards=(ModelFile(path="a.gguf", sha256="0" * 64, size=3),))
NODE = NodeConfig(serve_programs=((Runtime.LLAMACPP, "/opt/llama-server"),),
                  env=(("OMP_NUM_THREADS", "2"),), run_as=RunAs(uid=65534, gid=65534))
ROLE = RoleSpec(name="coder", runtime=Runtime.LLAMACPP, mode=Mode.MANAGED, model="tiny",
                serve=ServeSpec(port=8090, ctx=4096))


def launch(role=ROLE, node=NODE, environ=None):
    environ = {"HOME": "/root", "PATH": "/usr/bin"} if environ is None else environ
    return identity.launch(role, {"tiny": MODEL}, node, environ, "/var/lib/r/instances")


def test_child_environment_is_built_from_nothing():
    """Default PATH, then NodeConfig env, then set passthrough variables, then the marker."""
    env = dict(launch().env)
    assert env == {"PATH": "/usr/bin", "HOME": "/root", "OMP_NUM_THREADS": "2",
                   "RECONCILER_INSTANCE": identity.instance_id(ROLE)}
    bare = dict(launch(environ={}).env)
    assert bare["PATH"] == identity.DEFAULT_PATH and "HOME" not in bare


def test_launch_argv_and_cwd():
    """llama.cpp gets the reconciler-owned flags and --alias; cwd is <data_root>/<id>."""
    l = launch()
    assert l.argv == ("/opt/llama-server", "--model", "/m/a.gguf", "--host", "127.0.0.1",
                      "--port", "8090", "--ctx-size", "4096", "--alias", "tiny")
    assert l.cwd == f"/var/lib/r/instances/{identity.instance_id(ROLE)}"


def test_digest_changes_with_the_launch_only():
    """ctx, node env and run_as change the digest; memory, excludes and policy do not."""
    import attrs

    base = launch().digest
    assert launch(attrs.evolve(ROLE, serve=attrs.evolve(ROLE.serve, ctx=8192))).digest != base
    assert launch(node=attrs.evolve(NODE, env=())).digest != base
    assert launch(node=attrs.evolve(NODE, run_as=RunAs(uid=1000, gid=1000))).digest != base
    same = attrs.evolve(ROLE, memory=MemorySpec(weights=1, kv=2), excludes=frozenset({"x"}),
                        restart=RestartPolicy(max_restarts=1))
    assert launch(same).digest == base


def test_passed_through_values_do_not_restart():
    """Running from another shell (other HOME/PATH values) keeps the digest."""
    base = launch().digest
    assert launch(environ={"HOME": "/home/op", "PATH": "/usr/local/bin"}).digest == base
    # …but a passthrough variable appearing or vanishing is a change of launch.
    assert launch(environ={"PATH": "/usr/bin"}).digest != base


def test_instance_id_follows_identity_fields():
    """name|runtime|model|host:port|mode make the id; ctx does not."""
    import attrs

    iid = identity.instance_id(ROLE)
    assert iid.startswith("coder-") and len(iid) == len("coder-") + 8
    assert identity.instance_id(attrs.evolve(ROLE, serve=ServeSpec(port=8091))) != iid
    assert identity.instance_id(attrs.evolve(ROLE, serve=ServeSpec(port=8090, ctx=1))) == iid


def test_argv_changes_names_what_changed():
    """The restart reason says which flag moved and how."""
    old = ("/p", "--ctx-size", "4096", "--port", "1")
    new = ("/p", "--ctx-size", "8192", "--port", "1")
    assert identity.argv_changes(old, new) == "ctx 4096 → 8192"


def test_launch_digests_are_pinned():
    """The digest's value never changes across releases: a new value would restart every server."""
    import attrs

    assert launch().digest == "6a65e6222073745aad30afc51ed988922b56b6f2a53b9fbf1b1112f908f1ff8b"
    odd = attrs.evolve(NODE, env=(("NOTE", 'quote " back\\ tab\t é ∑ 😀'),), run_as=None)
    assert launch(node=odd).digest == (
        "4112293067363aabbd2bd2e6cd9c3319279ec8aa4f0c735bc7ddd3a2ee61ff6b")
    mlx = RoleSpec(name="voice", runtime=Runtime.MLX_LM, mode=Mode.MANAGED, model="tiny",
                   serve=ServeSpec(port=8091, extra_args=("--temp", "0.5")))
    node = attrs.evolve(NODE, serve_programs=((Runtime.MLX_LM, "/opt/mlx"),))
    assert launch(role=mlx, node=node, environ={}).digest == (
        "bc3b1bbcbc3b5fd8c53bfae8729b519bbe689acb837264930b76bda4fb67b9f0")


@given(
    argv=st.lists(st.text()),
    env=st.lists(st.tuples(st.text(), st.text())),
    cwd=st.text(),
    run_as=st.one_of(st.none(), st.tuples(st.integers(0, 2**32), st.integers(0, 2**32))),
)
def test_canonical_text_is_sorted_key_json(argv, env, cwd, run_as):
    """The hand-written canonical text is byte for byte json.dumps(..., sort_keys=True)."""
    want = json.dumps({"argv": argv, "env": env, "cwd": cwd,
                       "run_as": list(run_as) if run_as is not None else None}, sort_keys=True)
    assert identity.canonical(argv, env, cwd, run_as) == want


def _digest_as_before(role, node, environ, data_root):
    """The launch digest as round 1 computed it (json.dumps), the oracle of the Launcher."""
    import hashlib

    program = node.serve_program(role.runtime) or f"<no serve_programs.{role.runtime}>"
    argv = (program, *identity.launch_argv(role, MODEL, None))
    instance = identity.instance_id(role)
    env = identity.child_env(node, environ, instance)
    passed = {name for name in node.env_passthrough if name in environ}
    digest_env = [(k, "<passed through>" if k in passed else v) for k, v in env]
    canonical = json.dumps({
        "argv": argv, "env": digest_env, "cwd": f"{data_root.rstrip('/')}/{instance}",
        "run_as": [node.run_as.uid, node.run_as.gid] if node.run_as else None,
    }, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


KEYS = st.sampled_from(["HOME", "PATH", "A", "Z", "RECONCILER_INSTANCE", "LANG"])


@given(
    env=st.dictionaries(KEYS, st.text(max_size=5)),
    passthrough=st.lists(KEYS, unique=True),
    environ=st.dictionaries(KEYS, st.text(max_size=5)),
    run_as=st.one_of(st.none(), st.builds(RunAs, uid=st.integers(1, 70000),
                                          gid=st.integers(0, 70000))),
    data_root=st.sampled_from(["/var/lib/r/instances", "/srv/", "/"]),
    port=st.integers(1, 65535),
)
def test_launcher_digest_equals_the_json_digest(env, passthrough, environ, run_as, data_root,
                                                port):
    """Whatever the node's env, passthrough and run_as, the digest is the one round 1 computed."""
    import attrs

    node = attrs.evolve(NODE, env=tuple(sorted(env.items())), env_passthrough=tuple(passthrough),
                        run_as=run_as)
    role = attrs.evolve(ROLE, serve=attrs.evolve(ROLE.serve, port=port))
    got = identity.launch(role, {"tiny": MODEL}, node, environ, data_root)
    assert got is not None
    assert got.digest == _digest_as_before(role, node, environ, data_root)
    assert dict(got.env)[identity.MARKER_ENV] == identity.instance_id(role)
    assert got.env == identity.child_env(node, environ, identity.instance_id(role))


def test_llamacpp_argv_carries_kv_quant_both_ways_and_extra_args_last():
    """kv_quant sets --cache-type-k and --cache-type-v; extra_args follow the reconciler's flags."""
    import attrs

    role = attrs.evolve(ROLE, serve=attrs.evolve(ROLE.serve, kv_quant="q8_0",
                                                 extra_args=("--threads", "4")))
    argv = launch(role).argv
    assert argv[argv.index("--cache-type-k") + 1] == "q8_0"
    assert argv[argv.index("--cache-type-v") + 1] == "q8_0"
    assert argv[-2:] == ("--threads", "4")


def test_mlx_argv_binds_the_spec_host():
    """mlx_lm.server gets --host from the spec (loopback), --port, then extra_args."""
    mlx = RoleSpec(name="voice", runtime=Runtime.MLX_LM, mode=Mode.MANAGED, model="tiny",
                   serve=ServeSpec(port=8091, extra_args=("--temp", "0.5")))
    argv = identity.launch_argv(mlx, MODEL, None)
    assert argv == ("--model", "/m", "--host", "127.0.0.1", "--port", "8091", "--temp", "0.5")


def test_llamacpp_draft_flag_names_the_draft_model():
    """--model-draft is the draft model's first shard, never the main model's."""
    import attrs

    draft = ModelSpec(name="small", format=ModelFormat.GGUF, root="/d",
                      shards=(ModelFile(path="s.gguf", sha256="1" * 64, size=1),))
    role = attrs.evolve(ROLE, serve=attrs.evolve(ROLE.serve, draft_model="small"))
    argv = identity.launch_argv(role, MODEL, draft)
    assert argv[argv.index("--model-draft") + 1] == "/d/s.gguf"
    assert argv[argv.index("--model") + 1] == "/m/a.gguf"


def test_an_explicit_nodeconfig_path_wins_over_the_default():
    """Rule (§6): a PATH set in NodeConfig env replaces the default PATH in the child; a
    passed-through PATH that is set wins over both; the default is only the fallback."""
    import attrs

    node = attrs.evolve(NODE, env=(("PATH", "/opt/cuda/bin:/usr/bin"),), env_passthrough=())
    assert dict(launch(node=node, environ={"PATH": "/home/op/bin"}).env)["PATH"] == \
        "/opt/cuda/bin:/usr/bin"
    node = attrs.evolve(node, env_passthrough=("PATH",))
    assert dict(launch(node=node, environ={"PATH": "/home/op/bin"}).env)["PATH"] == "/home/op/bin"
    assert dict(launch(node=node, environ={}).env)["PATH"] == "/opt/cuda/bin:/usr/bin"
