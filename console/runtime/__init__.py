"""asyncio services around the core: worker, scheduler, outbox dispatcher. Never imports Textual."""
