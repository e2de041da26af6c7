"""(in progress)"""


async def run_property() -> None:
    return None
