mod load;
mod matching;
mod shares;
