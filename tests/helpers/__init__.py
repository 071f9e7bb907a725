"""What the tests share, in one place: S3 (moto) and server fixtures, a fake clock, fake text,
repository checks, the shared-trajectories locator, old-release extraction, the recording TCP proxy,
the fault-injecting store, the format-1 writes switch and the project's paths. Test files import
from here (``from tests.helpers.fake_clock import Clock``), never from each other."""
