"""Load tests with locust: notify, watch fan-out, replay and a mixed profile.

``aviso-server load run SCENARIO`` (see :mod:`aviso_loadtests.run`) starts the servers on loopback,
runs locust headless in a child process (:mod:`aviso_loadtests.child`, the only place locust
and gevent are imported), and reports every figure beside its baseline.
"""
