"""Start it in two terminals (or on two hosts sharing one store): each 2 s slot runs in one of them."""
import os

import leasecron

cron = leasecron.LeaseCron(os.environ.get("LEASECRON_STORE", "sqlite:///leasecron.db"))


@cron.job("* * * * * */2", name="report")  # every 2 s (a sixth field: seconds)
def report(ctx: leasecron.Context) -> None:
    ctx.signal.raise_if_aborted()  # stopping? raise, and a backup takes the run over
    print("report of slot", ctx.slot, flush=True)


if __name__ == "__main__":
    cron.run_forever()  # until SIGTERM or Ctrl-C, then hands a live run over
