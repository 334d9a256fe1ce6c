def main():  # placeholder replaced by the CLI
    raise SystemExit("leasecron CLI: not built yet")
