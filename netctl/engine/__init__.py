"""The engine: one CNI request → network selection → concurrent chains → result."""
