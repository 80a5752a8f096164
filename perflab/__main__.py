import sys

from perflab.cli import main

sys.exit(main())
