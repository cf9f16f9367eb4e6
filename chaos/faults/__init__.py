"""Faults: inject, verify it took effect, heal, verify the heal. Always healed."""

from chaos.faults.base import Fault
from chaos.faults.client import ClientFault
from chaos.faults.menu import Faults
from chaos.faults.network import ProxyDown, ToxicFault
from chaos.faults.process import Freeze, Kill, Restart

__all__ = ["ClientFault", "Fault", "Faults", "Freeze", "Kill", "ProxyDown", "Restart", "ToxicFault"]
