import sys

from paddle_ft.cli import main

sys.exit(main())
