"""``python -m ddpnet`` runs the CLI."""

from __future__ import annotations

from ddpnet.cli.main import main

if __name__ == "__main__":
    main()
