export default (pi) => {
  return [
