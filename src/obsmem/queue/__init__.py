"""Durable background work on PostgreSQL (``background="queue"``).

Serving processes queue each log's background work in the transaction of the turn's write
(:mod:`obsmem.queue.jobs`); ``obsmem worker`` processes claim the jobs and run the cycles
(:mod:`obsmem.queue.work`, :mod:`obsmem.queue.worker`). The queue is procrastinate's, its
tables created by obsmem's own migrations.
"""
