"""The commands: ``netctl`` and ``kubectl netctl`` (:mod:`~netctl.commands.cli`, one
``_add_*`` per command group), and how they print (:mod:`~netctl.commands.console`,
:mod:`~netctl.commands.journalview`, :mod:`~netctl.commands.statusview`)."""
