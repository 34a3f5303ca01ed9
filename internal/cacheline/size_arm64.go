package cacheline

const size = 128
