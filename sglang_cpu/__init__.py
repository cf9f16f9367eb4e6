"""Real SGLang on CPU: the engines' launcher (``launch.py``), the startup-resolution check
(``resolve.py``), the tiny model's maker and the ``sgl_kernel`` shim. ``launch.py`` and
``resolve.py`` run under the SGLang venv's interpreter by path; pd-chaos imports ``launch``
for the flags and the CPU swap it shares with the gpu-on-cpu target."""
