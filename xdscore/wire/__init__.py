"""The wire layer: protobuf framing and the codec for the xDS envelope messages."""
