"""The stop signals of a sweep, without Ray: SIGTERM and SIGHUP raise within the block and name themselves, even
after something (as ``ray.init`` does) replaced the handler, and the previous handlers come back after."""
import os
import signal

import pytest
from ndebench.platform.failures import exitcodes
from ndebench.platform.failures.stopping import Stopped, describe, reclaim, stop_on_signals


@pytest.mark.parametrize(("signum", "name", "code"), [(signal.SIGTERM, "SIGTERM", exitcodes.TERMINATED),
                                                       (signal.SIGHUP, "SIGHUP", exitcodes.HANGUP)])
def test_a_stop_signal_raises_and_names_itself(signum, name, code):
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt) as stopped, stop_on_signals():
        os.kill(os.getpid(), signum)
    assert isinstance(stopped.value, Stopped) and describe(stopped.value) == (name, code)
    assert signal.getsignal(signum) is before


def test_the_signal_is_named_when_a_native_wait_re_raised_a_plain_keyboard_interrupt():
    with pytest.raises(KeyboardInterrupt), stop_on_signals():
        signal.signal(signal.SIGTERM, lambda *_: None)  # what ray.init does to the driver's SIGTERM
        reclaim()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Stopped as caught:
            raise KeyboardInterrupt from caught
    assert describe(KeyboardInterrupt()) == ("SIGTERM", exitcodes.TERMINATED)
    with stop_on_signals():
        assert describe(KeyboardInterrupt()) == ("SIGINT (Ctrl-C)", exitcodes.INTERRUPTED)
