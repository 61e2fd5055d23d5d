"""c4p, the product: one package per part, so a reader finds the loop by name.

``cli`` (a module per command), ``controller`` (intake, reconcile loop, state, triggers; no
gRPC), ``service`` (gRPC servicers, access control, telemetry, the runtime and ``c4p serve``'s
configuration), ``store`` (SQLite, etcd), ``client`` (the Python flow-intent client),
``agent`` (the host agent), ``detector`` (the collective as a sensor), ``lab`` (the Linux
fabric lab), ``testing`` (emulated switches for tests and demos), ``figures`` (the benchmark
ladders and the rollout report), ``demos`` (``make demo``), ``api`` (generated stubs).

Three modules stay at the top because several of those packages read them and none of those
packages may import another for it: ``errors`` (the one error tree), ``files`` (the only
place data files are read and written) and ``endpoints`` (how the agent and the controller name
a controller endpoint and a credential, without the agent importing the controller).
"""
