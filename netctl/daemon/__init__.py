"""The daemon: its wiring (:mod:`~netctl.daemon.run`: every part built once, the start-up
order, the shutdown), its socket (:mod:`~netctl.daemon.server`: frames, peer credentials,
limits, the drain) and what it says about itself (:mod:`~netctl.daemon.status`)."""
