package cacheline

const size = 256
