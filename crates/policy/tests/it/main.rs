mod load;
mod matching;
