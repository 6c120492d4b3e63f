import sys

from kstore.cli import main

if __name__ == "__main__":
    sys.exit(main())
