"""The front door: every ``python -m physattack[.x]`` command lives here, over one builder and one
error path. Nothing below this package prints to the terminal for the user or exits."""
