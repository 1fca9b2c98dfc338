"""Looking at a table without changing it: ``memwal status`` (:mod:`memwal.inspect.status`),
``memwal verify`` (:mod:`memwal.inspect.verify`) and the status page (:mod:`memwal.inspect.page`
with :mod:`memwal.inspect.charts` and ``status_page.html.j2``)."""
