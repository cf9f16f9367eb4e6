"""``pdchaos doctor``: live "where is it stuck" forensics on a running deployment."""

from chaos.doctor.run import DoctorReport, run_doctor, write_report

__all__ = ["DoctorReport", "run_doctor", "write_report"]
