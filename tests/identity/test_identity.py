"""Instance ids, the child's environment and the launch digest (reconciler.identity)."""

from __future__ import annotations

from reconciler import identity
from reconciler.desired import (
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
