"""Write each rule's documentation page into rules/docs/ from the rule modules (run after changing a rule):

python scripts/rule_docs.py
"""

from vramlens.rules.docs import write_pages

if __name__ == "__main__":
    for path in write_pages():
        print(path)
