"""The ``argus`` command line, built on the SDK. One module per group of commands
(``tasks``, ``accounts``, ``completion``), each with a ``register(sub, add_parser)``; the
list of them is ``main.COMMAND_MODULES``."""
