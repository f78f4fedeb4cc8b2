"""The run kinds (wattlab's trainer, a user's command) and what runs inside them: the runner and
its checks, the warm worker, the windows and progress of a training run, a command's guard and
meter."""
