"""What tests and benches share: world builders, fakes, and the manifest documents e2e tests write.

* ``worlds``: the planner's inputs built as values (a Model, a node, a managed role, the
  context), the same in unit tests, properties and benches;
* ``roles``: InferenceSpec documents as YAML text, for tests that write manifests to disk
  and run the real command (e2e, router, status page);
* ``fakes``: stand-ins for the shell's parts (scripted pass results, a pass runner, an NVML
  reader), each with a contract test against the real thing where both can run.
"""
