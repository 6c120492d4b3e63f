import sys

from kstore.cli import main

sys.exit(main())
