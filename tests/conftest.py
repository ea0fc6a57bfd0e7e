"""Suite-wide isolation: no test reads the user's profile store or caches."""

import os
import tempfile

_ROOT = tempfile.mkdtemp(prefix="hetplan-tests-")
os.environ.setdefault("HETPLAN_PROFILE_DIR", os.path.join(_ROOT, "profiles"))
os.environ.setdefault("HETPLAN_CACHE_DIR", os.path.join(_ROOT, "cache"))
