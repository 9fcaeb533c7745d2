import sys

from fakedev.cli import main

sys.exit(main())
